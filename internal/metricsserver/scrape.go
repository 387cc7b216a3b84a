package metricsserver

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
)

// Counters reads the named counters from the /metrics at url, as Serve
// serves them, each summed over its series whose labels contain label
// (`queue="orders`, say; empty takes every series). A name with no such
// series is absent from the answer, not 0: the harnesses that read a
// process's counters tell a counter at zero from a series renamed.
func Counters(ctx context.Context, client *http.Client, url, label string, names ...string) (map[string]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	res, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		return nil, err
	}
	values := make(map[string]float64, len(names))
	for line := range strings.SplitSeq(string(body), "\n") {
		if strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) < 2 {
			continue
		}
		metric := fields[0]
		if label != "" && !strings.Contains(metric, label) {
			continue
		}
		if brace := strings.IndexByte(metric, '{'); brace >= 0 {
			metric = metric[:brace]
		}
		for _, name := range names {
			if metric == name {
				if v, err := strconv.ParseFloat(fields[len(fields)-1], 64); err == nil {
					values[name] += v
				}
			}
		}
	}
	return values, nil
}

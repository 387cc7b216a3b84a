package emq

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// queuesKey is the registry of declared queues.
const queuesKey = "{emq}:queues"

var errRow = errors.New("emq: malformed job row")

// rowStates maps the one-letter states of a job row to their names.
var rowStates = map[byte]string{
	'p': StatePending, 'a': StateActive, 'w': StateDelayed,
	'x': StateDead, 'd': StateDone, 'c': StateCanceled,
}

// decodeRow reads a job row as lua/lib.lua writes it, the value of the job's
// field in the jobs hash (or, once finished, in the finished hash):
//
//	1<state>,<attempts>,<forgiven>,<created>,<claimed>,<died>,<finished>,<#kind>,<#group>,<#error>:<kind><group><error><payload>
func decodeRow(id, row string) (JobInfo, error) {
	header, body, found := strings.Cut(row, ":")
	if !found || !strings.HasPrefix(header, "1") {
		return JobInfo{}, fmt.Errorf("job %s: %w: unknown format %.16q", id, errRow, row)
	}
	fields := strings.Split(header[1:], ",")
	if len(fields) != 10 || len(fields[0]) != 1 {
		return JobInfo{}, fmt.Errorf("job %s: %w: header %q", id, errRow, header)
	}
	state, known := rowStates[fields[0][0]]
	if !known {
		return JobInfo{}, fmt.Errorf("job %s: %w: state %q", id, errRow, fields[0])
	}
	var numbers [6]int64
	for i, text := range fields[1:7] {
		if text == "" {
			continue
		}
		n, err := strconv.ParseInt(text, 10, 64)
		if err != nil {
			return JobInfo{}, fmt.Errorf("job %s: %w: %w", id, errRow, err)
		}
		numbers[i] = n
	}
	var strs [3]string
	for i, text := range fields[7:] {
		n, err := strconv.Atoi(text)
		if err != nil || n < 0 || n > len(body) {
			return JobInfo{}, fmt.Errorf("job %s: %w: length %q", id, errRow, text)
		}
		strs[i], body = body[:n], body[n:]
	}
	attempts, created, finished := numbers[0], numbers[2], numbers[5]
	info := JobInfo{
		ID: id, State: state, Kind: strs[0], Group: strs[1], LastError: strs[2],
		Attempts: attempts, Payload: []byte(body), Created: time.UnixMilli(created).UTC(),
	}
	if finished != 0 {
		info.Finished = time.UnixMilli(finished).UTC()
	}
	return info, nil
}

package testkit_test

import (
	"bufio"
	"bytes"
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/ordergate/ordergate/"

// layers lists the product's packages from the bottom up: a package imports
// only packages of a lower layer, so two packages of one layer never import
// each other (emq knows nothing of orders; postgres and placement are
// sibling adapters). A name ending in "/" stands for every package under it.
var layers = [][]string{
	{"lua", "migrations", "secret", "internal/jsonstring"},
	{"internal/"},
	{"orders", "signing", "emq", "coherence"},
	{"postgres", "placement", "api", "api/client", "emq/internal/"},
	{"gateway", "settlement", "control"},
	{"cmd/"},
}

// forbidden holds imports the layers would allow but the design does not.
var forbidden = map[string][]string{
	// The gateway reaches the queue only through placement, which owns the
	// rate-limit buckets and the errors the gateway maps.
	"gateway": {"emq"},
}

func layerOf(pkg string) int {
	best, bestLen := -1, -1
	for i, layer := range layers {
		for _, name := range layer {
			matches := pkg == name || (strings.HasSuffix(name, "/") && strings.HasPrefix(pkg, name))
			if matches && len(name) > bestLen {
				best, bestLen = i, len(name)
			}
		}
	}
	return best
}

// imports lists every package of the module with its non-test imports of
// the module, by `go list`, so the test reads what the compiler builds.
func imports(t *testing.T) map[string][]string {
	t.Helper()
	cmd := exec.Command("go", "list", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, "./...")
	cmd.Dir = ".."
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	graph := make(map[string][]string)
	scanner := bufio.NewScanner(bytes.NewReader(out))
	for scanner.Scan() {
		fields := strings.Fields(scanner.Text())
		pkg := strings.TrimPrefix(fields[0], module)
		graph[pkg] = nil
		for _, imported := range fields[1:] {
			if strings.HasPrefix(imported, module) {
				graph[pkg] = append(graph[pkg], strings.TrimPrefix(imported, module))
			}
		}
	}
	if len(graph) == 0 {
		t.Fatal("go list listed no packages")
	}
	return graph
}

// TestDependenciesFlowOneWay draws the import graph and fails on an arrow
// running back up: a runtime package importing the harness, a package
// importing one of its own layer or above, or an import the design forbids.
func TestDependenciesFlowOneWay(t *testing.T) {
	for pkg, imported := range imports(t) {
		harness := pkg == "testkit" || strings.HasPrefix(pkg, "testkit/")
		for _, dep := range imported {
			depHarness := dep == "testkit" || strings.HasPrefix(dep, "testkit/")
			switch {
			case depHarness && !harness:
				t.Errorf("%s imports the test harness %s", pkg, dep)
			case harness:
				// The harness sits above everything it tests.
			case layerOf(pkg) < 0:
				t.Errorf("%s is in no layer: add it to layers in this file", pkg)
			case layerOf(dep) >= layerOf(pkg):
				t.Errorf("%s (layer %d) imports %s (layer %d): dependencies flow down only", pkg, layerOf(pkg), dep, layerOf(dep))
			}
			for _, no := range forbidden[pkg] {
				if dep == no {
					t.Errorf("%s imports %s", pkg, dep)
				}
			}
		}
	}
}

package client

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestGeneratedCodeIsCurrent regenerates the client from the spec and compares
// it with client.gen.go, so a spec change without `make generate` fails CI
// instead of shipping a client that disagrees with the server.
//
// It runs the pinned generator through the module's tool directive, the same
// command go:generate runs, so the comparison is exact (the generator stamps
// its version into the header) and needs no network once modules are cached.
func TestGeneratedCodeIsCurrent(t *testing.T) {
	// go test puts its own GOROOT/bin first in PATH, so this is the go that
	// runs the test.
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("go command not found: %v", err)
	}

	committed, err := os.ReadFile("client.gen.go")
	if err != nil {
		t.Fatalf("read committed client: %v", err)
	}

	// Without -o the generator prints to stdout; the config has no output key,
	// so nothing on disk is touched.
	cmd := exec.CommandContext(t.Context(), goBin, "tool", "oapi-codegen", "-config", "oapi-codegen.yaml", "../openapi.yaml")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(cmd.Args, " "), err, stderr.String())
	}

	if got := stdout.Bytes(); !bytes.Equal(got, committed) {
		t.Fatalf("client.gen.go is stale: run make generate (first difference at line %d)", firstDifferentLine(committed, got))
	}
}

func firstDifferentLine(a, b []byte) int {
	al, bl := bytes.Split(a, []byte("\n")), bytes.Split(b, []byte("\n"))
	for i := range min(len(al), len(bl)) {
		if !bytes.Equal(al[i], bl[i]) {
			return i + 1
		}
	}
	return min(len(al), len(bl)) + 1
}

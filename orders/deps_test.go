package orders_test

import (
	"os/exec"
	"strings"
	"testing"
)

// The domain imports no infrastructure: an adapter's import here would pull
// a driver into every package that only wants the types.
func TestDomainImportsNoInfrastructure(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	forbidden := []string{
		"github.com/jackc/pgx",
		"github.com/redis/go-redis",
		"github.com/ordergate/ordergate/emq",
		"github.com/ordergate/ordergate/postgres",
		"github.com/ordergate/ordergate/placement",
		"github.com/ordergate/ordergate/coherence",
		"net/http",
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, prefix := range forbidden {
			if strings.HasPrefix(dep, prefix) {
				t.Errorf("orders depends on %s", dep)
			}
		}
	}
}

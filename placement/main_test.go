package placement_test

import (
	"os"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ordergate/ordergate/testkit/testserver"
)

func TestMain(m *testing.M) { os.Exit(testserver.Main(m)) }

// migratedPool is a fresh database at the newest schema.
func migratedPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	return testserver.MigratedPostgres(t).Pool(t)
}

package placement_test

import (
	"os"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ordergate/ordergate/internal/testserver"
	"github.com/ordergate/ordergate/migrations"
)

func TestMain(m *testing.M) { os.Exit(testserver.Main(m)) }

// migratedPool is a fresh database at the newest schema.
func migratedPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	database := testserver.Postgres(t)
	if err := migrations.Up(database.URL); err != nil {
		t.Fatal(err)
	}
	return database.Pool(t)
}

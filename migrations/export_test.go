package migrations

import "github.com/golang-migrate/migrate/v4"

// UpTo migrates to version, up or down.
func UpTo(databaseURL string, version uint) error {
	return run(databaseURL, func(m *migrate.Migrate) error { return m.Migrate(version) })
}

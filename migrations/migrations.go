// Package migrations holds the PostgreSQL schema as golang-migrate files and
// applies them. The binaries carry the files embedded, so a deployment needs
// no checkout to migrate.
package migrations

import (
	"embed"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/golang-migrate/migrate/v4"
	_ "github.com/golang-migrate/migrate/v4/database/pgx/v5" // registers pgx5://
	"github.com/golang-migrate/migrate/v4/source/iofs"
)

//go:embed *.sql
var files embed.FS

// Up applies every migration not yet applied. It is safe to run from several
// processes at once: golang-migrate takes an advisory lock.
func Up(databaseURL string) error {
	return run(databaseURL, func(m *migrate.Migrate) error { return m.Up() })
}

// Down reverts every migration.
func Down(databaseURL string) error {
	return run(databaseURL, func(m *migrate.Migrate) error { return m.Down() })
}

// Version is the schema version applied (0 for none) and whether a failed
// migration left it dirty.
func Version(databaseURL string) (version uint, dirty bool, err error) {
	err = run(databaseURL, func(m *migrate.Migrate) error {
		version, dirty, err = m.Version()
		if errors.Is(err, migrate.ErrNilVersion) {
			return nil // nothing applied
		}
		return err
	})
	return version, dirty, err
}

func run(databaseURL string, step func(*migrate.Migrate) error) error {
	source, err := iofs.New(files, ".")
	if err != nil {
		return fmt.Errorf("migrations: open embedded files: %w", err)
	}
	target, err := driverURL(databaseURL)
	if err != nil {
		return err
	}
	m, err := migrate.NewWithSourceInstance("iofs", source, target)
	if err != nil {
		return fmt.Errorf("migrations: connect: %w", err)
	}
	defer m.Close()
	if err := step(m); err != nil && !errors.Is(err, migrate.ErrNoChange) {
		return fmt.Errorf("migrations: %w", err)
	}
	return nil
}

// driverURL points a postgres:// URL at golang-migrate's pgx v5 driver. The
// pool_* parameters are pgxpool's (the binaries' pools read them from the
// same DATABASE_URL); the driver would pass them to PostgreSQL as settings,
// which refuses them, so they are left out.
func driverURL(databaseURL string) (string, error) {
	parsed, err := url.Parse(databaseURL)
	if err != nil {
		return "", fmt.Errorf("migrations: database url: %w", err)
	}
	switch parsed.Scheme {
	case "postgres", "postgresql", "pgx5":
		parsed.Scheme = "pgx5"
	default:
		return "", fmt.Errorf("migrations: database url scheme %q, want postgres://", parsed.Scheme)
	}
	query := parsed.Query()
	for name := range query {
		if strings.HasPrefix(name, "pool_") {
			query.Del(name)
		}
	}
	parsed.RawQuery = query.Encode()
	return parsed.String(), nil
}

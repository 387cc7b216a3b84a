package postgres

import (
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// takeOverWait bounds how long a take-over waits for the instrument: for
// the settler's own batch under the instrument's lock to end, and for the
// instrument row's lock in PostgreSQL (lock_timeout). A stuck holder (an
// owner stopped mid-write holds it up to its 5 s idle timeout) then fails
// the take-over rather than hanging it; the worker tries again while it
// holds the lease.
const takeOverWait = time.Second

// ErrTakeOverBlocked matches a take-over that waited takeOverWait for the
// instrument: nothing changed, and it may be tried again.
var ErrTakeOverBlocked = errors.New("postgres: the take-over waited too long for the instrument")

// takeOverBlocked makes PostgreSQL's lock_not_available match
// ErrTakeOverBlocked.
func takeOverBlocked(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "55P03" {
		return fmt.Errorf("%w: %w", ErrTakeOverBlocked, err)
	}
	return err
}

package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ConfigurePool readies config's connections for this package's statements
// (RegisterTypes on each new connection, after any AfterConnect config
// already has). Every pool the statements run on should be made with it;
// without it they run the same, only dearer.
func ConfigurePool(config *pgxpool.Config) {
	previous := config.AfterConnect
	config.AfterConnect = func(ctx context.Context, conn *pgx.Conn) error {
		if previous != nil {
			if err := previous(ctx, conn); err != nil {
				return err
			}
		}
		RegisterTypes(conn.TypeMap())
		return nil
	}
}

// RegisterTypes makes m send a numeric[] parameter in the text format
// first. Statements that pass their numeric arrays as decimal text
// ([]string, []*string: exact, no float; an owner's write sends literals,
// numericArray, instead), which pgx cannot encode in
// numeric[]'s preferred binary format; it tried that first for every such
// parameter of every statement, searching for an encode plan anew each
// time (a plan that is not found is not remembered), building the error,
// and only then sent the text. The bytes sent are the same either way.
// No statement of this package returns a numeric[] column, whose result
// format this also sets.
func RegisterTypes(m *pgtype.Map) {
	numericArray, ok := m.TypeForOID(pgtype.NumericArrayOID)
	if !ok {
		return
	}
	m.RegisterType(&pgtype.Type{Name: numericArray.Name, OID: numericArray.OID, Codec: textFirst{numericArray.Codec}})
}

// textFirst is a codec whose preferred format is text.
type textFirst struct{ pgtype.Codec }

func (textFirst) PreferredFormat() int16 { return pgtype.TextFormatCode }

// NewPool opens a pool on databaseURL made with ConfigurePool.
func NewPool(ctx context.Context, databaseURL string) (*pgxpool.Pool, error) {
	config, err := pgxpool.ParseConfig(databaseURL)
	if err != nil {
		return nil, err
	}
	ConfigurePool(config)
	return pgxpool.NewWithConfig(ctx, config)
}

package postgres_test

import (
	"bytes"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/ordergate/ordergate/postgres"
)

// numericParams are the numeric[] parameters of one settle_insert_orders
// of a 16-order write: nine arrays of decimal text, two with NULLs.
func numericParams() (*pgconn.StatementDescription, []any) {
	price := "50000.5"
	var values []string
	var prices []*string
	for i := range 16 {
		values = append(values, "0.0125")
		if i%2 == 0 {
			prices = append(prices, &price)
		} else {
			prices = append(prices, nil)
		}
	}
	sd := &pgconn.StatementDescription{}
	var args []any
	for i := range 9 {
		sd.ParamOIDs = append(sd.ParamOIDs, pgtype.NumericArrayOID)
		if i < 2 {
			args = append(args, prices)
		} else {
			args = append(args, values)
		}
	}
	return sd, args
}

func typeMaps() map[string]*pgtype.Map {
	registered := pgtype.NewMap()
	postgres.RegisterTypes(registered)
	return map[string]*pgtype.Map{"pgx's default": pgtype.NewMap(), "RegisterTypes": registered}
}

// The parameters go out the same with RegisterTypes as without: in the
// text format, byte for byte.
func TestRegisterTypesSendsTheSameParameters(t *testing.T) {
	sd, args := numericParams()
	built := map[string]*pgx.ExtendedQueryBuilder{}
	for name, m := range typeMaps() {
		var eqb pgx.ExtendedQueryBuilder
		if err := eqb.Build(m, sd, args); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for i, format := range eqb.ParamFormats {
			if format != pgtype.TextFormatCode {
				t.Errorf("%s: parameter %d in format %d, want text", name, i, format)
			}
		}
		built[name] = &eqb
	}
	want, got := built["pgx's default"].ParamValues, built["RegisterTypes"].ParamValues
	if len(got) != len(want) {
		t.Fatalf("%d parameters, want %d", len(got), len(want))
	}
	for i := range want {
		if !bytes.Equal(got[i], want[i]) {
			t.Errorf("parameter %d: %q, want %q", i, got[i], want[i])
		}
	}
}

// BenchmarkNumericParams encodes the numeric[] parameters of one write.
func BenchmarkNumericParams(b *testing.B) {
	sd, args := numericParams()
	for name, m := range typeMaps() {
		b.Run(name, func(b *testing.B) {
			var eqb pgx.ExtendedQueryBuilder
			b.ReportAllocs()
			for b.Loop() {
				if err := eqb.Build(m, sd, args); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

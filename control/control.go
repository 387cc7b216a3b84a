// Package control holds the operator's writes that change PostgreSQL and
// then tell the caches in Redis: revoking an API key, halting or resuming an
// instrument. Each write stands once PostgreSQL has it; the broadcast that
// follows only hastens what the caches would see within their expiry.
package control

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ordergate/ordergate/coherence"
	"github.com/ordergate/ordergate/placement"
	"github.com/ordergate/ordergate/postgres"
)

// Control makes the operator's writes.
type Control struct {
	accounts    *postgres.Accounts
	instruments *postgres.Instruments
	// caches broadcasts the changes; nil broadcasts nothing.
	caches *coherence.Client
}

// New writes to db and broadcasts through caches (nil: no broadcast).
func New(db *pgxpool.Pool, caches *coherence.Client) *Control {
	return &Control{accounts: postgres.NewAccounts(db), instruments: postgres.NewInstruments(db), caches: caches}
}

// RevokeKey revokes an API key by its KEY id, then tells the gateways so
// they drop their cached copy of the key at once instead of when it
// expires (placement.KeyCache): it raises the key's stamp, which Redis
// invalidates in every gateway's local copy (the tracking mode), and
// broadcasts the revocation for gateways that keep no local copy (on a
// Redis Cluster). Both are told after PostgreSQL has the revocation: their
// failure is returned but the revocation stands, and every gateway stops
// taking the key within its cache's time to live.
func (c *Control) RevokeKey(ctx context.Context, keyID string) error {
	hash, err := c.accounts.RevokeKey(ctx, keyID)
	if err != nil {
		return err
	}
	if c.caches == nil {
		return nil
	}
	hashHex := hex.EncodeToString(hash)
	if err := errors.Join(c.caches.Touch(ctx, placement.APIKeysTable, hashHex),
		c.caches.Broadcast(ctx, placement.APIKeysTable, hashHex)); err != nil {
		return fmt.Errorf("control: %s is revoked, but the gateways were not all told (they refuse it once their cached copy expires): %w", keyID, err)
	}
	return nil
}

// SetInstrumentHalted halts or resumes trading in an instrument, then
// raises the instruments' stamp (gateways with a local copy reread at their
// next request) and broadcasts the change (those without reread at once)
// instead of at their next refresh. Their failure is returned but the halt
// stands, and the periodic refresh delivers it.
func (c *Control) SetInstrumentHalted(ctx context.Context, symbol string, halted bool) error {
	if err := c.instruments.SetHalted(ctx, symbol, halted); err != nil {
		return err
	}
	if c.caches == nil {
		return nil
	}
	if err := errors.Join(c.caches.Touch(ctx, placement.InstrumentsTable, placement.InstrumentsStamp),
		c.caches.Broadcast(ctx, placement.InstrumentsTable, placement.InstrumentsTable+":"+symbol)); err != nil {
		state := "trading"
		if halted {
			state = "halted"
		}
		return fmt.Errorf("control: %s is %s, but the broadcast failed (gateways see it at their next refresh): %w", symbol, state, err)
	}
	return nil
}

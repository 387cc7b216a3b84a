package orders

import "context"

// OutboxEntry is one row of the outbox: a balance changed to a new
// version. Name is "balances:<account>:<asset>"; Payload is "<name>@<version>",
// the message both coherence modes carry and the job mode's dedup key.
type OutboxEntry struct {
	ID      int64
	Name    string
	Version int64
	Payload string
}

// BalanceName is the outbox name of one account's balance of one asset.
func BalanceName(account, asset string) string { return "balances:" + account + ":" + asset }

// Relayer hears of outbox entries right after the transaction that wrote
// them commits, and carries them to the coherence queue. A crash before it
// runs is caught by the relay's sweep of unrelayed rows.
type Relayer interface {
	Relay(ctx context.Context, entries []OutboxEntry)
}

// BalanceVersion says one account's balance of one asset reached Version:
// what an outbox row of a balance announces.
type BalanceVersion struct {
	Account, Asset string
	Version        int64
}

// Name is the outbox name of the balance.
func (v BalanceVersion) Name() string { return BalanceName(v.Account, v.Asset) }

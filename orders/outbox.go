package orders

import (
	"context"
	"strings"
)

// OutboxEntry is one row of the outbox: a balance changed to a new
// version, or a write's events of one account on one instrument. A
// balance's Name is "balances:<account>:<asset>" (BalanceName) and its
// Payload "<name>@<version>", the message both coherence modes carry and
// the job mode's dedup key; an events row's Name is EventsName's, its
// Payload the events' snapshot (postgres.RenderEvents).
type OutboxEntry struct {
	ID      int64
	Name    string
	Version int64
	Payload string
}

// BalancesTable names the outbox rows of balances (BalanceName); their
// coherence queue and cache keys carry it too.
const BalancesTable = "balances"

// BalanceName is the outbox name of one account's balance of one asset.
func BalanceName(account, asset string) string { return BalancesTable + ":" + account + ":" + asset }

// EventsTable names the outbox rows of accounts' events: one per account
// and instrument a write touched (EventsName), each a source of the
// account's log of events.
const EventsTable = "events"

// EventsName is the outbox name of an account's events on one instrument.
func EventsName(account, symbol string) string { return EventsTable + ":" + account + ":" + symbol }

// EventsAccount is the account an EventsName names, and whether name is one.
func EventsAccount(name string) (string, bool) {
	rest, found := strings.CutPrefix(name, EventsTable+":")
	account, symbol, found2 := strings.Cut(rest, ":")
	return account, found && found2 && account != "" && symbol != ""
}

// Relayer hears of outbox entries right after the transaction that wrote
// them commits, and carries them to the coherence queue. A crash before it
// runs is caught by the relay's sweep of unrelayed rows.
type Relayer interface {
	Relay(ctx context.Context, entries []OutboxEntry)
}

// TurnRelayer is a Relayer that relays in a line: RelayInTurn is Relay for
// entries whose events rows must reach their accounts' logs after those of
// the relay before them, which closes turn once its own are in line (nil:
// none is before them). It
// calls inLine once entries are in line behind them (or never will be),
// so the next relay may go, and returns once they are relayed, like Relay.
// What need not wait (the coherence jobs) goes at once.
type TurnRelayer interface {
	Relayer
	RelayInTurn(ctx context.Context, entries []OutboxEntry, turn <-chan struct{}, inLine func())
}

// BalanceVersion says one account's balance of one asset reached Version:
// what an outbox row of a balance announces.
type BalanceVersion struct {
	Account, Asset string
	Version        int64
}

// Name is the outbox name of the balance.
func (v BalanceVersion) Name() string { return BalanceName(v.Account, v.Asset) }

package orders

import (
	"context"
	"strconv"
	"strings"
)

// OutboxEntry is one row of the outbox: a balance changed to a new
// version, a settlement write's balances, or a write's events of one
// account on one instrument. A balance's Name is
// "balances:<account>:<asset>" (BalanceName) and its Payload
// "<name>@<version>", the message both coherence modes carry and the job
// mode's dedup key; a settlement write's row is BalancesWriteName's,
// its Payload those lines, one per balance (BalanceEntries); an events
// row's Name is EventsName's, its Payload the events' snapshot
// (postgres.RenderEvents).
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

// BalancesWriteName names the one outbox row a settlement write (a batch,
// a cancel's release) inserts for all the balances it moved: its Payload
// lists them, "<name>@<version>" a line, each balance once. One row a
// write, not one a balance, is one insert and one delete (once relayed)
// where a batch of a hundred balances cost a hundred of each. Its version
// is the row's own id, so every write's row is unique under the one name.
// It is under the balances' prefix, so where the outbox tells families
// apart by name it is a balances row: relayed by their coherence mode,
// deleted once relayed.
const BalancesWriteName = BalancesTable + ":*"

// BalanceEntries are the balances' entries entry announces: for a
// settlement write's row (BalancesWriteName), one per line of its payload,
// as the balance's own row would read (a line that is no name@version
// keeps its text as name and payload, at version 0, for the consumer to
// refuse); for any other entry, entry itself.
func BalanceEntries(entry OutboxEntry) []OutboxEntry {
	if entry.Name != BalancesWriteName {
		return []OutboxEntry{entry}
	}
	entries := make([]OutboxEntry, 0, strings.Count(entry.Payload, "\n")+1)
	for line := range strings.Lines(entry.Payload) {
		line = strings.TrimSuffix(line, "\n")
		name, version := line, int64(0)
		if balance, ok := ParseBalanceLine(line); ok {
			name, version = balance.Name, balance.Version
		}
		entries = append(entries, OutboxEntry{Name: name, Version: version, Payload: line})
	}
	return entries
}

// BalanceLine is one balance's line of an outbox payload read:
// "<name>@<version>", and for a settlement write's line the amounts after
// it (SplitBalanceAmounts), Carried when they read as two decimals.
type BalanceLine struct {
	Name            string
	Version         int64
	Available, Held string
	Carried         bool
}

// ParseBalanceLine reads a balance's line; ok is false when its head is no
// "<name>@<version>" with a positive version.
func ParseBalanceLine(line string) (balance BalanceLine, ok bool) {
	head, available, held, carried := SplitBalanceAmounts(line)
	at := strings.LastIndexByte(head, '@')
	if at <= 0 {
		return BalanceLine{}, false
	}
	version, err := strconv.ParseInt(head[at+1:], 10, 64)
	if err != nil || version <= 0 {
		return BalanceLine{}, false
	}
	return BalanceLine{Name: head[:at], Version: version, Available: available, Held: held, Carried: carried}, true
}

// SplitBalanceAmounts splits a balance's line into its "<name>@<version>"
// head and the amounts a settlement write's line carries after it,
// "<name>@<version> <available> <held>" (migration 0026): carried is false
// for a line without them (a deposit's, a write of a release before) or
// whose amounts do not read as two decimals, which the consumer then reads
// back as it reads the others. The amounts are
// exact decimal strings, never parsed to floats.
func SplitBalanceAmounts(line string) (head, available, held string, carried bool) {
	at := strings.LastIndexByte(line, '@')
	space := strings.IndexByte(line[at+1:], ' ')
	if space < 0 {
		return line, "", "", false
	}
	head, amounts := line[:at+1+space], line[at+1+space+1:]
	available, held, found := strings.Cut(amounts, " ")
	if !found || !isDecimal(available) || !isDecimal(held) {
		return head, "", "", false
	}
	return head, available, held, true
}

// isDecimal reports whether s is a decimal number as PostgreSQL spells a
// NUMERIC: an optional minus, digits, and optionally a point and digits.
func isDecimal(s string) bool {
	s = strings.TrimPrefix(s, "-")
	whole, fraction, pointed := strings.Cut(s, ".")
	return allDigits(whole) && (!pointed || allDigits(fraction))
}

func allDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := range len(s) {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

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

package placement

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/ordergate/ordergate/emq"
	"github.com/ordergate/ordergate/orders"
)

// An account's events are the log of the account's group on its shard's
// events queue (EventLogs; emq/log.go; docs/api.md, The event stream),
// numbered 1, 2, ... without gaps. This file holds every append; account_events_stream.go reads them
// back. The writers:
//
//   - the outbox relay: an events row written by a settlement or a cancel,
//     which Outbox.RenderEvents turns into the order.accepted of each order
//     whose row it inserted, the fills and the order states it announces
//     (postgres.RenderEvents reads the row's snapshot as the SQL wrote
//     it), appended once per row in its source's order
//     (OutboxRelay.appendEvents). Admission appends nothing: an order's
//     queue is on its instrument's Redis slot, its account's log on
//     another, and one script touches one slot;
//   - the balance consumer: a balance event for each balance it refilled,
//     once the cache holds it (BalanceCoherence.announce).
//
// Each writer makes orders.EventDraft values, and logEntry makes the log's
// entry of one, so an event is shaped the same whoever appends it.

// EventLog appends to accounts' logs of events (EventLogs.AppendLogs, or
// one queue's emq.Queue.AppendLogs).
type EventLog interface {
	AppendLogs(ctx context.Context, appends []emq.LogAppend) ([]emq.LogAppended, error)
}

// logEntry is the log's entry of an event; the log numbers it.
func logEntry(draft orders.EventDraft) emq.LogEntry {
	return emq.LogEntry{ID: draft.ID, Type: string(draft.Type), Data: draft.Data}
}

// appendEvents appends the events rows' events to their accounts' logs,
// each row once and in its source's order (emq.LogSource: the row's name
// and version), in one round trip, and returns the rows appended (or found
// appended already). A row whose source's earlier rows are not all in the
// log yet (their relay is late, or was lost with Redis) has them appended
// first, read from the outbox; rows gone from it are skipped for good.
func (r *OutboxRelay) appendEvents(ctx context.Context, entries []orders.OutboxEntry) ([]orders.OutboxEntry, error) {
	rendered := r.renderEvents(entries)
	appended, err := r.eventsLogs.AppendLogs(ctx, rendered.appends)
	return r.appendedEvents(ctx, rendered, appended, err)
}

// renderedEvents are events rows rendered as log appends: appends[i] is
// sent[i]'s; carried are the rows with nothing to append.
type renderedEvents struct {
	appends []emq.LogAppend
	sent    []orders.OutboxEntry
	carried []orders.OutboxEntry
}

// renderEvents renders the events rows, each source's versions in order
// (one pipeline runs its calls in order).
func (r *OutboxRelay) renderEvents(entries []orders.OutboxEntry) renderedEvents {
	slices.SortFunc(entries, func(a, b orders.OutboxEntry) int {
		return cmp.Or(strings.Compare(a.Name, b.Name), cmp.Compare(a.Version, b.Version))
	})
	out := renderedEvents{
		appends: make([]emq.LogAppend, 0, len(entries)),
		sent:    make([]orders.OutboxEntry, 0, len(entries)),
		carried: make([]orders.OutboxEntry, 0, len(entries)),
	}
	for _, entry := range entries {
		append_, err := r.eventAppend(entry, false)
		if err != nil {
			// No retry renders it: it is marked relayed, its events left
			// out, and the source's next row is forced past it.
			r.logger.Error("events row cannot be rendered; its events are left out", "name", entry.Name, "version", entry.Version, "err", err)
			out.carried = append(out.carried, entry)
			continue
		}
		if len(append_.Entries) == 0 {
			out.carried = append(out.carried, entry)
			continue
		}
		out.appends, out.sent = append(out.appends, append_), append(out.sent, entry)
	}
	return out
}

// appendedEvents sorts out the answers to rendered's appends (err, the
// call's, when appended is nil) and returns the rows appended (or found
// appended already), with those that had nothing to append.
func (r *OutboxRelay) appendedEvents(ctx context.Context, rendered renderedEvents, appended []emq.LogAppended, err error) ([]orders.OutboxEntry, error) {
	carried := rendered.carried
	if appended == nil {
		return carried, err
	}
	// An append past a gap is made after the rows before it; any other
	// failure waits for the sweep.
	var errs []error
	for i, entry := range rendered.sent {
		var gap *emq.LogGapError
		switch failure := appended[i].Err; {
		case failure == nil:
		case errors.As(failure, &gap):
			failure = r.appendEventsFrom(ctx, r.eventsLogs.For(rendered.appends[i].Group), entry)
			if failure != nil {
				errs = append(errs, failure)
				continue
			}
		default:
			errs = append(errs, failure)
			continue
		}
		carried = append(carried, entry)
	}
	return carried, errors.Join(errs...)
}

// appendEventsFrom appends entry's events after the rows of its source
// missing before it, read from the outbox. A row gone from what the outbox
// gives back (announced long ago and lost with Redis since, or one that
// cannot be rendered) is skipped: the row after it is forced past it.
func (r *OutboxRelay) appendEventsFrom(ctx context.Context, log *emq.Queue, entry orders.OutboxEntry) error {
	for range 3 {
		err := r.appendRow(ctx, log, entry, false)
		var gap *emq.LogGapError
		if !errors.As(err, &gap) {
			return err
		}
		missing, err := r.db.EventRows(ctx, entry.Name, gap.Held, entry.Version)
		if err != nil {
			return err
		}
		next := gap.Held + 1
		for _, row := range missing {
			err := r.appendRow(ctx, log, row, row.Version != next)
			if errors.Is(err, errEventsSkipped) {
				continue
			}
			if err != nil {
				return err
			}
			next = row.Version + 1
		}
		if next != entry.Version {
			r.logger.Warn("events rows missing from the outbox or unrenderable; appending past them", "name", entry.Name,
				"after", gap.Held, "version", entry.Version)
			return r.appendRow(ctx, log, entry, true)
		}
	}
	return fmt.Errorf("relay events %s@%d: the source kept gaps", entry.Name, entry.Version)
}

// errEventsSkipped: an events row that cannot be rendered, or holds no
// event, was left out of its account's log.
var errEventsSkipped = errors.New("events row skipped")

// appendRow appends one events row's events, forced past a gap when force.
func (r *OutboxRelay) appendRow(ctx context.Context, log *emq.Queue, row orders.OutboxEntry, force bool) error {
	append_, err := r.eventAppend(row, force)
	if err != nil {
		r.logger.Error("events row cannot be rendered; its events are left out", "name", row.Name, "version", row.Version, "err", err)
		return errEventsSkipped
	}
	if len(append_.Entries) == 0 {
		return errEventsSkipped
	}
	_, err = log.AppendLog(ctx, append_.Group, append_.Source, append_.Entries)
	return err
}

// eventAppend is the log append of an events row: its account's group, its
// source (name, version, forced past a gap when force), its events.
func (r *OutboxRelay) eventAppend(entry orders.OutboxEntry, force bool) (emq.LogAppend, error) {
	account, ok := orders.EventsAccount(entry.Name)
	if !ok {
		return emq.LogAppend{}, fmt.Errorf("%w: %q names no account's events", ErrOutboxPayload, entry.Name)
	}
	drafts, err := r.db.RenderEvents(entry)
	if err != nil {
		return emq.LogAppend{}, err
	}
	logEntries := make([]emq.LogEntry, len(drafts))
	for i, draft := range drafts {
		logEntries[i] = logEntry(draft)
	}
	return emq.LogAppend{Group: account, Source: emq.LogSource{Name: entry.Name, Version: entry.Version, Force: force}, Entries: logEntries}, nil
}

// balanceEvent is the balance event of a balance at its version: its id
// is the balance's name at that version.
func balanceEvent(name string, balance *orders.Balance) (orders.EventDraft, error) {
	data, err := json.Marshal(balance)
	if err != nil {
		return orders.EventDraft{}, fmt.Errorf("encode balance %s: %w", name, err)
	}
	return orders.EventDraft{ID: name + "@" + strconv.FormatInt(balance.Version, 10), Type: orders.EventBalance, Data: data}, nil
}

// announce appends each current balance's balance event to its account's
// log, once per version and never below one announced: the balance's name
// is the event's source and its version the source's version, forced past
// the versions the consumer skipped (it caches the current row, not every
// version).
func (c *BalanceCoherence) announce(ctx context.Context, deliveries []*coherenceDelivery, current map[string]*orders.Balance) error {
	if c.events == nil {
		return nil
	}
	appends := make([]emq.LogAppend, 0, len(deliveries))
	for _, delivery := range deliveries {
		balance := current[delivery.name]
		if balance == nil {
			continue
		}
		event, err := balanceEvent(delivery.name, balance)
		if err != nil {
			return err
		}
		appends = append(appends, emq.LogAppend{
			Group:   delivery.account,
			Source:  emq.LogSource{Name: delivery.name, Version: balance.Version, Force: true},
			Entries: []emq.LogEntry{logEntry(event)},
		})
	}
	if len(appends) == 0 {
		return nil
	}
	if _, err := c.events.AppendLogs(ctx, appends); err != nil {
		return fmt.Errorf("append balance events: %w", err)
	}
	return nil
}

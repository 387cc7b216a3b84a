package chaos

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ordergate/ordergate/orders"
	"github.com/ordergate/ordergate/postgres"
)

// The books: after the run, the book in PostgreSQL must be the one every
// owner held when it stopped and the one the next owner loads (issue 24,
// point 6).

var (
	//go:embed sql/resting_read.sql
	restingReadSQL string
	//go:embed sql/owner_epochs.sql
	ownerEpochsSQL string
	//go:embed sql/owned_instruments.sql
	ownedInstrumentsSQL string
)

// readBooks reads every instrument's resting orders from the orders table
// and sorts each side by priority itself: bids by price descending, asks
// ascending, then by sequence.
func readBooks(ctx context.Context, db *pgxpool.Pool) (map[string]*postgres.OwnerBook, error) {
	rows, err := db.Query(ctx, restingReadSQL)
	if err != nil {
		return nil, err
	}
	books := map[string]*postgres.OwnerBook{}
	var symbol, side, price, remaining, hold string
	var o postgres.RestingOrder
	_, err = pgx.ForEachRow(rows, []any{&symbol, &side, &o.ID, &o.Account, &price, &remaining, &hold, &o.Sequence}, func() error {
		var err error
		o.Side = orders.Side(side)
		if o.Price, err = orders.ParseExact(price); err != nil {
			return err
		}
		if o.Remaining, err = orders.ParseExact(remaining); err != nil {
			return err
		}
		if o.Hold, err = orders.ParseExact(hold); err != nil {
			return err
		}
		book := books[symbol]
		if book == nil {
			book = &postgres.OwnerBook{Symbol: symbol}
			books[symbol] = book
		}
		if o.Side == orders.Buy {
			book.Bids = append(book.Bids, o)
		} else {
			book.Asks = append(book.Asks, o)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	for _, book := range books {
		slices.SortFunc(book.Bids, func(a, b postgres.RestingOrder) int {
			return cmp.Or(b.Price.Cmp(a.Price), cmp.Compare(a.Sequence, b.Sequence))
		})
		slices.SortFunc(book.Asks, func(a, b postgres.RestingOrder) int {
			return cmp.Or(a.Price.Cmp(b.Price), cmp.Compare(a.Sequence, b.Sequence))
		})
	}
	return books, nil
}

// bookDifferences lists how got differs from want, sequences included, at
// most a few lines.
func bookDifferences(got, want postgres.OwnerBook) []string {
	var diffs []string
	for _, side := range []struct {
		name      string
		got, want []postgres.RestingOrder
	}{{"bids", got.Bids, want.Bids}, {"asks", got.Asks, want.Asks}} {
		if len(side.got) != len(side.want) {
			diffs = append(diffs, fmt.Sprintf("%s: %d orders, PostgreSQL rests %d", side.name, len(side.got), len(side.want)))
		}
		for i := range min(len(side.got), len(side.want)) {
			g, w := side.got[i], side.want[i]
			if g.ID != w.ID || g.Account != w.Account || g.Side != w.Side || g.Price.Cmp(w.Price) != 0 ||
				g.Remaining.Cmp(w.Remaining) != 0 || g.Hold.Cmp(w.Hold) != 0 || g.Sequence != w.Sequence {
				diffs = append(diffs, fmt.Sprintf("%s #%d: %+v, PostgreSQL %+v", side.name, i, g, w))
				break
			}
		}
	}
	return diffs
}

// checkBooks stops the workers (each owner logs the book it gives up, when
// every write of it committed: postgres.Settler.GiveUp) and compares every
// such book with PostgreSQL's; then it takes every instrument over as a
// fresh owner would, above the last owner's epoch, and compares the book
// that owner loads. Returns how many live books and loaded books it compared.
func (r *run) checkBooks(ctx context.Context) (live, loaded int) {
	books, err := readBooks(ctx, r.db)
	if err != nil {
		r.errorf("books: read the resting orders: %v", err)
		return 0, 0
	}
	bookOf := func(symbol string) postgres.OwnerBook {
		if b := books[symbol]; b != nil {
			return *b
		}
		return postgres.OwnerBook{Symbol: symbol}
	}

	// The live owners' books: only what the workers log from now on.
	type logFrom struct {
		path   string
		offset int64
	}
	// Every instrument owned now must have its book logged: one owner's
	// book alone would let the others' go unchecked.
	rows, err := r.db.Query(ctx, ownedInstrumentsSQL)
	if err != nil {
		r.errorf("books: read the owned instruments: %v", err)
		return 0, 0
	}
	owned, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		r.errorf("books: read the owned instruments: %v", err)
		return 0, 0
	}
	logged := make(map[string]bool)
	var logs []logFrom
	var stopping sync.WaitGroup
	for _, slot := range r.slots {
		slot.stateMu.Lock()
		proc := slot.proc
		slot.stateMu.Unlock()
		if proc == nil {
			continue
		}
		if info, err := os.Stat(proc.logPath); err == nil {
			logs = append(logs, logFrom{proc.logPath, info.Size()})
		}
		stopping.Go(func() { proc.terminate(10 * time.Second) })
	}
	stopping.Wait()
	for _, l := range logs {
		content, err := os.ReadFile(l.path)
		if err != nil {
			r.errorf("books: %v", err)
			continue
		}
		scanner := bufio.NewScanner(bytes.NewReader(content[min(l.offset, int64(len(content))):]))
		// A line longer than the buffer ends the scan (bufio.ErrTooLong),
		// which Err reports below rather than the books after it going
		// unchecked.
		scanner.Buffer(nil, 64<<20)
		for scanner.Scan() {
			var line struct {
				Msg    string `json:"msg"`
				Symbol string `json:"symbol"`
				Orders int    `json:"book_orders"`
				Digest string `json:"book_digest"`
			}
			if json.Unmarshal(scanner.Bytes(), &line) != nil || line.Msg != "gave an instrument up" {
				continue
			}
			live++
			logged[line.Symbol] = true
			if want := bookOf(line.Symbol); line.Digest != want.Digest() {
				r.errorf("books: the owner of %s stopped holding a book of %d orders (digest %.12s) that is not PostgreSQL's %d orders (digest %.12s)",
					line.Symbol, line.Orders, line.Digest, want.Orders(), want.Digest())
			}
		}
		if err := scanner.Err(); err != nil {
			r.errorf("books: read %s: %v", l.path, err)
		}
	}
	for _, symbol := range owned {
		if !logged[symbol] {
			r.errorf("books: the owner of %s logged no book when it stopped", symbol)
		}
	}

	// A fresh owner's load.
	rows, err = r.db.Query(ctx, ownerEpochsSQL)
	if err != nil {
		r.errorf("books: read the owner epochs: %v", err)
		return live, 0
	}
	var symbol string
	var epoch int64
	epochs := map[string]int64{}
	if _, err := pgx.ForEachRow(rows, []any{&symbol, &epoch}, func() error { epochs[symbol] = epoch; return nil }); err != nil {
		r.errorf("books: read the owner epochs: %v", err)
		return live, 0
	}
	settler := postgres.NewSettler(r.db, nil, slog.New(slog.DiscardHandler))
	for _, symbol := range slices.Sorted(maps.Keys(epochs)) {
		takeCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := settler.TakeOver(takeCtx, symbol, epochs[symbol]+1)
		cancel()
		if err != nil {
			r.errorf("books: take %s over at %d: %v", symbol, epochs[symbol]+1, err)
			continue
		}
		got, ok := settler.OwnedBook(symbol)
		settler.GiveUp(symbol)
		if !ok {
			r.errorf("books: %s taken over, but its owner holds no book", symbol)
			continue
		}
		loaded++
		for _, diff := range bookDifferences(got, bookOf(symbol)) {
			r.errorf("books: %s as its next owner loads it: %s", symbol, diff)
		}
	}
	return live, loaded
}

package postgres

import (
	"errors"
	"fmt"
	"strings"
)

// parseSnapshot reads an events row's payload, as settle_events.sql writes
// it: an object of "orders" and "fills" (arrays of rows, each an array of
// scalar columns) and "accepted" (an array of strings). Each column is
// kept as its JSON text, a substring of payload, for scanColumn to read;
// every row's columns share one slice. It is hand-written because
// encoding/json, reading the rows into json.RawMessage by reflection, was
// most of the relay's rendering (BenchmarkSnapshotParse).
//
// It checks the structure, not every scalar: scanColumn parses each
// column into its type and refuses what does not parse.
func parseSnapshot(payload string) (eventSnapshot, error) {
	var snapshot eventSnapshot
	// No row has more columns than the payload has commas, plus one: the
	// rows' columns fit one allocation.
	p := snapshotParser{text: payload, columns: make([]string, 0, strings.Count(payload, ",")+1)}
	p.expect('{')
	for seen := 0; p.err == nil; seen++ {
		if seen > 0 && !p.next(',') {
			break
		}
		key := p.scalar()
		p.expect(':')
		switch key {
		case `"orders"`:
			snapshot.Orders = p.rows()
		case `"fills"`:
			snapshot.Fills = p.rows()
		case `"accepted"`:
			var accepted []string
			p.array(func() {
				var id string
				if column := p.scalar(); p.err == nil {
					p.fail(unquote(column, &id))
					accepted = append(accepted, id)
				}
			})
			snapshot.Accepted = accepted
		default:
			p.fail(fmt.Errorf("unexpected key %s", key))
		}
	}
	p.expect('}')
	if p.skipSpace(); p.err == nil && p.at < len(p.text) {
		p.fail(errors.New("text after the object"))
	}
	if p.err != nil {
		return eventSnapshot{}, fmt.Errorf("snapshot at byte %d: %w", p.at, p.err)
	}
	return snapshot, nil
}

// snapshotParser reads text from at; the first error stops it.
type snapshotParser struct {
	text    string
	at      int
	err     error
	columns []string // of every row read, in order
}

func (p *snapshotParser) fail(err error) {
	if p.err == nil {
		p.err = err
	}
}

func (p *snapshotParser) skipSpace() {
	for p.at < len(p.text) && (p.text[p.at] == ' ' || p.text[p.at] == '\n' || p.text[p.at] == '\t' || p.text[p.at] == '\r') {
		p.at++
	}
}

// next consumes c, if it comes next.
func (p *snapshotParser) next(c byte) bool {
	p.skipSpace()
	if p.err == nil && p.at < len(p.text) && p.text[p.at] == c {
		p.at++
		return true
	}
	return false
}

func (p *snapshotParser) expect(c byte) {
	if !p.next(c) {
		p.fail(fmt.Errorf("want %q", c))
	}
}

// array reads a JSON array, calling element for each element.
func (p *snapshotParser) array(element func()) {
	p.expect('[')
	if p.next(']') {
		return
	}
	for p.err == nil {
		element()
		if !p.next(',') {
			break
		}
	}
	p.expect(']')
}

// rows reads an array of rows of scalars, their columns in one slice.
func (p *snapshotParser) rows() []jsonRow {
	var rows []jsonRow
	p.array(func() {
		begin := len(p.columns)
		p.array(func() { p.columns = append(p.columns, p.scalar()) })
		rows = append(rows, p.columns[begin:len(p.columns):len(p.columns)])
	})
	return rows
}

// scalar reads a string (quotes and escapes as written), number, true,
// false or null, as its text.
func (p *snapshotParser) scalar() string {
	p.skipSpace()
	if p.err != nil {
		return ""
	}
	start := p.at
	if p.at < len(p.text) && p.text[p.at] == '"' {
		for p.at++; p.at < len(p.text); p.at++ {
			switch p.text[p.at] {
			case '\\':
				p.at++
			case '"':
				p.at++
				return p.text[start:p.at]
			}
		}
		p.fail(errors.New("unterminated string"))
		return ""
	}
	for p.at < len(p.text) && literalByte[p.text[p.at]] {
		p.at++
	}
	if p.at == start {
		p.fail(errors.New("want a string, number, true, false or null"))
	}
	return p.text[start:p.at]
}

// literalByte: the bytes of numbers, true, false and null.
var literalByte = func() (set [256]bool) {
	for _, c := range []byte("-+.0123456789eEtruefalsn") {
		set[c] = true
	}
	return set
}()

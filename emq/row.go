package emq

import (
	"errors"
	"fmt"
	"time"
)

// queuesKey is the registry of declared queues.
const queuesKey = "{emq}:queues"

var errRow = errors.New("emq: malformed job row")

// rowStates maps the one-letter states of a job row to their names.
var rowStates = map[string]string{
	"p": StatePending, "a": StateActive, "w": StateDelayed,
	"x": StateDead, "d": StateDone, "c": StateCanceled,
}

// decodeRow reads a job row as lua/lib.lua writes it, the value of the job's
// field in the jobs hash (or, once finished, in the finished hash): a
// sequence of MessagePack values,
//
//	1, state, attempts, forgiven, created, died, finished, kind, group, error, payload
func decodeRow(id, row string) (JobInfo, error) {
	r := rowReader{rest: row}
	if version := r.integer(); r.err == nil && version != 1 {
		return JobInfo{}, fmt.Errorf("job %s: %w: format version %d", id, errRow, version)
	}
	state := r.text()
	attempts, _, created, _, finished := r.integer(), r.integer(), r.integer(), r.integer(), r.integer()
	kind, group, lastError, payload := r.text(), r.text(), r.text(), r.text()
	name, known := rowStates[state]
	switch {
	case r.err != nil:
		return JobInfo{}, fmt.Errorf("job %s: %w", id, r.err)
	case !known:
		return JobInfo{}, fmt.Errorf("job %s: %w: state %q", id, errRow, state)
	case r.rest != "":
		return JobInfo{}, fmt.Errorf("job %s: %w: %d bytes after the payload", id, errRow, len(r.rest))
	}
	info := JobInfo{
		ID: id, State: name, Kind: kind, Group: group, LastError: lastError,
		Attempts: attempts, Payload: []byte(payload), Created: time.UnixMilli(created).UTC(),
	}
	if finished != 0 {
		info.Finished = time.UnixMilli(finished).UTC()
	}
	return info, nil
}

// rowReader reads the MessagePack values a row is made of: the integers and
// strings cmsgpack writes for Lua numbers and strings. The first error
// sticks; reads after it return zero values.
type rowReader struct {
	rest string
	err  error
}

func (r *rowReader) take(n int) string {
	if r.err != nil {
		return ""
	}
	if n > len(r.rest) {
		r.err = fmt.Errorf("%w: truncated", errRow)
		return ""
	}
	taken := r.rest[:n]
	r.rest = r.rest[n:]
	return taken
}

// unsigned reads an n-byte big-endian unsigned integer; 0 after an error.
func (r *rowReader) unsigned(n int) uint64 {
	b := r.take(n)
	if len(b) != n {
		return 0
	}
	var v uint64
	for i := 0; i < n; i++ {
		v = v<<8 | uint64(b[i])
	}
	return v
}

func (r *rowReader) integer() int64 {
	tag := byte(r.unsigned(1))
	switch {
	case r.err != nil:
		return 0
	case tag <= 0x7f: // positive fixint
		return int64(tag)
	case tag >= 0xe0: // negative fixint
		return int64(int8(tag))
	}
	switch tag {
	case 0xcc, 0xcd, 0xce, 0xcf: // uint 8, 16, 32, 64
		return int64(r.unsigned(1 << (tag - 0xcc)))
	case 0xd0:
		return int64(int8(r.unsigned(1)))
	case 0xd1:
		return int64(int16(r.unsigned(2)))
	case 0xd2:
		return int64(int32(r.unsigned(4)))
	case 0xd3:
		return int64(r.unsigned(8))
	}
	r.err = fmt.Errorf("%w: 0x%02x where an integer belongs", errRow, tag)
	return 0
}

func (r *rowReader) text() string {
	tag := byte(r.unsigned(1))
	var n uint64
	switch {
	case r.err != nil:
		return ""
	case tag >= 0xa0 && tag <= 0xbf: // fixstr
		n = uint64(tag & 0x1f)
	case tag >= 0xd9 && tag <= 0xdb: // str 8, 16, 32
		n = r.unsigned(1 << (tag - 0xd9))
	default:
		r.err = fmt.Errorf("%w: 0x%02x where a string belongs", errRow, tag)
		return ""
	}
	if n > uint64(len(r.rest)) {
		r.err = fmt.Errorf("%w: truncated", errRow)
		return ""
	}
	return r.take(int(n))
}

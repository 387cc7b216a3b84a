package emq

import (
	"encoding/binary"
	"errors"
	"strings"
	"testing"
	"time"
)

// packRow writes a row the way cmsgpack in lib.lua does, for rows the
// scripts would never write.
func packRow(values ...any) string {
	var b []byte
	for _, value := range values {
		switch v := value.(type) {
		case int:
			switch {
			case v >= 0 && v <= 0x7f:
				b = append(b, byte(v))
			case v >= 0:
				b = binary.BigEndian.AppendUint64(append(b, 0xcf), uint64(v))
			default:
				b = binary.BigEndian.AppendUint64(append(b, 0xd3), uint64(v))
			}
		case string:
			switch {
			case len(v) < 32:
				b = append(b, 0xa0|byte(len(v)))
			case len(v) <= 0xff:
				b = append(b, 0xd9, byte(len(v)))
			default:
				b = binary.BigEndian.AppendUint16(append(b, 0xda), uint16(len(v)))
			}
			b = append(b, v...)
		case []byte:
			b = append(b, v...)
		}
	}
	return string(b)
}

// attempts is how lib.lua writes attempts: always as a 32-bit unsigned integer.
func attempts(n uint32) []byte { return binary.BigEndian.AppendUint32([]byte{0xce}, n) }

func TestDecodeRow(t *testing.T) {
	created := time.UnixMilli(1764557034123).UTC()
	long := strings.Repeat("x", 300)
	tests := []struct {
		name    string
		row     string
		want    JobInfo
		wantErr string
	}{
		{
			name: "pending job",
			row:  packRow(1, "p", attempts(0), 0, int(created.UnixMilli()), 0, 0, "k", "g", "", "payload"),
			want: JobInfo{ID: "J", State: StatePending, Kind: "k", Group: "g", Payload: []byte("payload"), Created: created},
		},
		{
			name: "finished job with a long payload and an error",
			row:  packRow(1, "d", attempts(3), 1, int(created.UnixMilli()), 0, int(created.UnixMilli())+1000, "k", "g", "boom", long),
			want: JobInfo{
				ID: "J", State: StateDone, Kind: "k", Group: "g", Attempts: 3, Payload: []byte(long), Created: created,
				Finished: created.Add(time.Second), LastError: "boom",
			},
		},
		{name: "another format version", row: packRow(2, "p"), wantErr: "format version 2"},
		{name: "unknown state", row: packRow(1, "q", attempts(0), 0, 0, 0, 0, "k", "g", "", ""), wantErr: `state "q"`},
		{name: "truncated", row: packRow(1, "p", attempts(0), 0, 0, 0, 0, "k", "g", "", "payload")[:20], wantErr: "truncated"},
		{name: "a string where a number belongs", row: packRow(1, "p", "0"), wantErr: "where an integer belongs"},
		{name: "bytes after the payload", row: packRow(1, "p", attempts(0), 0, 0, 0, 0, "k", "g", "", "", "more"), wantErr: "after the payload"},
		{name: "empty", row: "", wantErr: "truncated"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := decodeRow("J", tt.row)
			if tt.wantErr != "" {
				if !errors.Is(err, errRow) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want errRow naming %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.ID != tt.want.ID || got.State != tt.want.State || got.Kind != tt.want.Kind || got.Group != tt.want.Group ||
				got.Attempts != tt.want.Attempts || string(got.Payload) != string(tt.want.Payload) ||
				!got.Created.Equal(tt.want.Created) || !got.Finished.Equal(tt.want.Finished) || got.LastError != tt.want.LastError {
				t.Errorf("decoded %+v, want %+v", got, tt.want)
			}
		})
	}
}

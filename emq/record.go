package emq

import (
	"errors"
	"strconv"
	"strings"
)

// queuesKey is the registry of declared queues.
const queuesKey = "{emq}:queues"

var errRecord = errors.New("emq: malformed finished-job record")

// decodeRecord reads the record finish() in lib.lua writes: "<length>:<bytes>"
// for each name and value in turn.
func decodeRecord(record string) (map[string]string, error) {
	fields := make(map[string]string)
	next := func() (string, bool) {
		colon := strings.IndexByte(record, ':')
		if colon < 0 {
			return "", false
		}
		length, err := strconv.Atoi(record[:colon])
		if err != nil || length < 0 || colon+1+length > len(record) {
			return "", false
		}
		value := record[colon+1 : colon+1+length]
		record = record[colon+1+length:]
		return value, true
	}
	for record != "" {
		name, ok := next()
		if !ok {
			return nil, errRecord
		}
		value, ok := next()
		if !ok {
			return nil, errRecord
		}
		fields[name] = value
	}
	return fields, nil
}

package orders

import "strconv"

// eventTimeLayout is RFC 3339 with milliseconds, always three digits: the
// time an event entered its stream is known to the millisecond.
const eventTimeLayout = "2006-01-02T15:04:05.000Z07:00"

// AppendJSON appends the event's JSON encoding to dst, the envelope a
// client receives: its time in UTC to the millisecond, and Data as stored,
// byte for byte (null when empty), so a resource's JSON is never decoded
// and encoded again on its way out. Data must hold one JSON value.
func (e Event) AppendJSON(dst []byte) []byte {
	dst = append(dst, `{"sequence":`...)
	dst = strconv.AppendInt(dst, e.Sequence, 10)
	dst = append(dst, `,"id":`...)
	dst = appendJSONString(dst, e.ID)
	dst = append(dst, `,"type":`...)
	dst = appendJSONString(dst, string(e.Type))
	dst = append(dst, `,"time":"`...)
	dst = e.Time.UTC().AppendFormat(dst, eventTimeLayout)
	dst = append(dst, `","data":`...)
	if len(e.Data) == 0 {
		dst = append(dst, "null"...)
	} else {
		dst = append(dst, e.Data...)
	}
	return append(dst, '}')
}

package emq

// Key lets the external tests reach a structure directly, to age a lease or
// count a set, without emq offering raw keys to its callers.
func (q *Queue) Key(suffix string) string { return q.key(suffix) }

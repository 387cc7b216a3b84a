package orders

// Bounds of one page of a listing.
const (
	DefaultListLimit = 50
	MaxListLimit     = 200
)

// ListQuery selects one page of an account's final orders, newest first.
type ListQuery struct {
	// Limit is the most orders on the page, 1 to MaxListLimit; zero means
	// DefaultListLimit.
	Limit int
	// After is an order id: the page starts with the next older order. Empty
	// starts with the newest.
	After string
	// Status keeps only orders in this final status; empty keeps every one.
	Status Status
}

// Page is one page of a listing.
type Page struct {
	Orders []Order
	// Next is the After of the next page (the id of this page's last order),
	// or empty when no older order is left.
	Next string
}

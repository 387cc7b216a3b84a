package postgres

// Orders is the orders table as the placement side reads and cancels it:
// History's reads and its record of queue cancels, and the Settler's cancels
// of resting orders, which take the instrument's lock and release the hold
// as settlement does.
type Orders struct {
	*History
	*Settler
}

// NewOrders joins history and settler.
func NewOrders(history *History, settler *Settler) Orders {
	return Orders{History: history, Settler: settler}
}

package orders

// The exchange's own two accounts; neither places orders.
const (
	// VenueAccount is the exchange's: it collects every trade's fees, the
	// maker's and the taker's, in the quote asset. It provides no
	// liquidity (orders settled before the market settled against it, and
	// keep those transactions).
	VenueAccount = "ACC_0000000000000000000000000V"
	// ExternalAccount is the world outside the exchange: deposits come from it,
	// withdrawals go to it. It is the one account allowed below zero.
	ExternalAccount = "ACC_0000000000000000000000000X"
)

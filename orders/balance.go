package orders

// Balance is one asset of an account, as clients read it.
type Balance struct {
	Asset string `json:"asset"`
	// Available is exact, with at least the asset's decimals ("1.50000000"
	// BTC) and more only where a fill left them.
	Available string `json:"available"`
	// Held is what the account's resting orders hold, exact like Available.
	Held string `json:"held"`
	// Version rises by one with every change of the balance. A reader never
	// sees it go down.
	Version int64 `json:"version"`
}

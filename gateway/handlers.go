package gateway

import (
	"context"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"
)

func (s *Server) placeOrder(c echo.Context) error {
	body, err := readJSONBody(c.Request(), s.config.BodyLimit)
	if err != nil {
		return err
	}
	req, err := decodePlaceRequest(body)
	if err != nil {
		return err
	}
	cmd, err := s.placeCommand(account(c), req)
	if err != nil {
		return err
	}
	order, replayed, err := s.placer.Place(c.Request().Context(), cmd)
	if err != nil {
		return err
	}
	header := c.Response().Header()
	header.Set(echo.HeaderLocation, "/v1/orders/"+order.ID)
	if replayed {
		header.Set("Idempotent-Replayed", "true")
		return c.JSON(http.StatusOK, order)
	}
	logger(c).Info("order admitted", "order_id", order.ID, "account", order.Account, "symbol", order.Symbol)
	return c.JSON(http.StatusAccepted, order)
}

func (s *Server) getOrder(c echo.Context) error {
	order, err := s.placer.Order(c.Request().Context(), account(c), c.Param("id"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, order)
}

func (s *Server) cancelOrder(c echo.Context) error {
	order, err := s.placer.Cancel(c.Request().Context(), account(c), c.Param("id"))
	if err != nil {
		return err
	}
	logger(c).Info("order canceled", "order_id", order.ID, "account", order.Account)
	return c.JSON(http.StatusOK, order)
}

func (s *Server) health(c echo.Context) error {
	return c.JSON(http.StatusOK, map[string]string{"status": "ok"})
}

type readiness struct {
	Status string            `json:"status"`
	Checks map[string]string `json:"checks"`
}

// readiness runs every probe at once, each bounded, and names the ones down.
func (s *Server) readiness(c echo.Context) error {
	ctx, cancel := context.WithTimeout(c.Request().Context(), 2*time.Second)
	defer cancel()
	type result struct {
		name string
		err  error
	}
	results := make(chan result, len(s.probes))
	for _, probe := range s.probes {
		go func() { results <- result{probe.Name, probe.Check(ctx)} }()
	}
	answer := readiness{Status: "ready", Checks: make(map[string]string, len(s.probes))}
	for range s.probes {
		r := <-results
		answer.Checks[r.name] = "ok"
		if r.err != nil {
			answer.Status = "unavailable"
			answer.Checks[r.name] = r.err.Error()
			logger(c).Warn("not ready", "check", r.name, "err", r.err)
		}
	}
	if answer.Status != "ready" {
		return c.JSON(http.StatusServiceUnavailable, answer)
	}
	return c.JSON(http.StatusOK, answer)
}

package gateway

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/oklog/ulid/v2"
)

const (
	headerRequestID = "X-Request-Id"
	contextLogger   = "gateway.logger"
	contextAccount  = "gateway.account"
	contextBucket   = "gateway.bucket"
	// contextOrder is the order a request placed or replayed, for its
	// access log line.
	contextOrder = "gateway.order"
)

// maxRequestID is the longest X-Request-Id used as it is, in bytes.
const maxRequestID = 128

// observe gives every request an id (the caller's X-Request-Id when it is
// well-formed) that every log line about it carries, and one access log
// line, which names the order a placement admitted. Headers are never
// logged: they carry API keys.
func (s *Server) observe(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		start := time.Now()
		id := c.Request().Header.Get(headerRequestID)
		if !idCharacters(id, maxRequestID) {
			id = ulid.Make().String()
		}
		c.Response().Header().Set(headerRequestID, id)
		err := next(c)
		if err != nil {
			c.Error(err)
		}
		status := c.Response().Status
		level := slog.LevelInfo
		if status >= 500 {
			level = slog.LevelError
		}
		ctx := c.Request().Context()
		if !s.log.Enabled(ctx, level) {
			return nil
		}
		attrs := make([]slog.Attr, 0, 8)
		attrs = append(attrs,
			slog.String("request_id", id),
			slog.String("method", c.Request().Method),
			slog.String("path", c.Request().URL.Path),
			slog.Int("status", status),
			slog.Int64("bytes", c.Response().Size),
			slog.Float64("duration_ms", float64(time.Since(start).Microseconds())/1000),
		)
		if account, ok := c.Get(contextAccount).(string); ok {
			attrs = append(attrs, slog.String("account", account))
		}
		if order, ok := c.Get(contextOrder).(string); ok {
			attrs = append(attrs, slog.String("order_id", order))
		}
		// Straight to the handler: Logger.LogAttrs would walk the stack for
		// a source position the line does not carry.
		record := slog.NewRecord(time.Now(), level, "request", 0)
		record.AddAttrs(attrs...)
		_ = s.log.Handler().Handle(ctx, record)
		return nil
	}
}

func requestID(c echo.Context) string { return c.Response().Header().Get(headerRequestID) }

// logger is the request's logger, which stamps its id on every line; made
// on first use, since most requests log nothing but their access line.
func (s *Server) logger(c echo.Context) *slog.Logger {
	if log, ok := c.Get(contextLogger).(*slog.Logger); ok {
		return log
	}
	log := s.log.With("request_id", requestID(c))
	c.Set(contextLogger, log)
	return log
}

func (s *Server) recoverPanics(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) (err error) {
		defer func() {
			if r := recover(); r != nil {
				if r == http.ErrAbortHandler {
					panic(r)
				}
				err = fmt.Errorf("gateway: panic: %v", r)
			}
		}()
		return next(c)
	}
}

func (s *Server) deadline(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		ctx, cancel := context.WithTimeout(c.Request().Context(), s.config.RequestTimeout)
		defer cancel()
		c.SetRequest(c.Request().WithContext(ctx))
		return next(c)
	}
}

// authenticate takes "Authorization: Bearer <key>" and puts the key's account
// on the context.
func (s *Server) authenticate(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		scheme, key, found := strings.Cut(c.Request().Header.Get("Authorization"), " ")
		if !found || !strings.EqualFold(scheme, "Bearer") || key == "" {
			return &requestError{kind: kindUnauthorized, detail: "send the API key as Authorization: Bearer <key>"}
		}
		key = strings.TrimSpace(key)
		account, err := s.accounts.Authenticate(c.Request().Context(), key)
		if err != nil {
			return err
		}
		c.Set(contextAccount, account)
		c.Set(contextBucket, keyBucket(key))
		return next(c)
	}
}

func account(c echo.Context) string {
	account, _ := c.Get(contextAccount).(string)
	return account
}

package gateway

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"regexp"
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
)

var requestIDPattern = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,128}$`)

// observe gives every request an id (the caller's X-Request-Id when it is
// well-formed), a logger that stamps the id on every line, and one access log
// line. Headers are never logged: they carry API keys.
func (s *Server) observe(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		start := time.Now()
		id := c.Request().Header.Get(headerRequestID)
		if !requestIDPattern.MatchString(id) {
			id = ulid.Make().String()
		}
		c.Response().Header().Set(headerRequestID, id)
		log := s.log.With("request_id", id)
		c.Set(contextLogger, log)
		err := next(c)
		if err != nil {
			c.Error(err)
		}
		status := c.Response().Status
		level := slog.LevelInfo
		if status >= 500 {
			level = slog.LevelError
		}
		attrs := []any{
			"method", c.Request().Method,
			"path", c.Request().URL.Path,
			"status", status,
			"bytes", c.Response().Size,
			"duration_ms", float64(time.Since(start).Microseconds()) / 1000,
		}
		if account, ok := c.Get(contextAccount).(string); ok {
			attrs = append(attrs, "account", account)
		}
		log.Log(c.Request().Context(), level, "request", attrs...)
		return nil
	}
}

func requestID(c echo.Context) string { return c.Response().Header().Get(headerRequestID) }

func logger(c echo.Context) *slog.Logger {
	if log, ok := c.Get(contextLogger).(*slog.Logger); ok {
		return log
	}
	return slog.Default()
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

package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
)

// servers are the redis-server and PostgreSQL this run started (nil when
// REDIS_URL / DATABASE_URL were given); stop stops exactly those.
type servers struct {
	dir         string
	redisURL    string
	databaseURL string
	redis       *exec.Cmd
	redisAddr   string
	pgBin       string
	pgData      string
}

// startServers starts what getenv does not name; PostgreSQL with the
// settings given (name=value) beside the bench's own.
func startServers(ctx context.Context, getenv func(string) string, progress func(string, ...any), settings []string) (*servers, error) {
	s := &servers{redisURL: getenv("REDIS_URL"), databaseURL: getenv("DATABASE_URL")}
	if s.redisURL != "" && s.databaseURL != "" {
		return s, nil
	}
	dir, err := os.MkdirTemp("", "ordergate-bench-")
	if err != nil {
		return nil, err
	}
	s.dir = dir
	if s.redisURL == "" {
		if err := s.startRedis(ctx); err != nil {
			s.stop()
			return nil, err
		}
		progress("started redis-server on %s", s.redisAddr)
	}
	if s.databaseURL == "" {
		if err := s.startPostgres(ctx, settings); err != nil {
			s.stop()
			return nil, err
		}
		progress("started postgres on %s", s.databaseURL)
	}
	return s, nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// startRedis runs redis-server without persistence and with noeviction, as a
// queue server must be configured.
func (s *servers) startRedis(ctx context.Context) error {
	binary, err := exec.LookPath("redis-server")
	if err != nil {
		return fmt.Errorf("redis-server not found (run scripts/deps.sh): %w", err)
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	s.redisAddr = "127.0.0.1:" + strconv.Itoa(port)
	logFile, err := os.Create(filepath.Join(s.dir, "redis.log"))
	if err != nil {
		return err
	}
	defer logFile.Close()
	s.redis = exec.Command(binary, "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--dir", s.dir, "--save", "", "--appendonly", "no", "--maxmemory-policy", "noeviction",
		"--daemonize", "no", "--protected-mode", "no")
	s.redis.Stdout, s.redis.Stderr = logFile, logFile
	if err := s.redis.Start(); err != nil {
		return fmt.Errorf("start redis-server: %w", err)
	}
	client := redis.NewClient(&redis.Options{Addr: s.redisAddr, MaxRetries: -1})
	defer client.Close()
	if err := waitFor(ctx, 15*time.Second, func() error { return client.Ping(ctx).Err() }); err != nil {
		return fmt.Errorf("redis-server on %s: %w (log in %s)", s.redisAddr, err, logFile.Name())
	}
	s.redisURL = "redis://" + s.redisAddr + "/0"
	return nil
}

func postgresBin() (string, error) {
	if path, err := exec.LookPath("postgres"); err == nil {
		if resolved, err := filepath.EvalSymlinks(path); err == nil {
			path = resolved
		}
		return filepath.Dir(path), nil
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Strings(dirs)
	for i := len(dirs) - 1; i >= 0; i-- {
		if _, err := os.Stat(filepath.Join(dirs[i], "postgres")); err == nil {
			return dirs[i], nil
		}
	}
	return "", errors.New("no PostgreSQL server found (run scripts/deps.sh)")
}

// asPostgres runs a PostgreSQL tool, as user postgres when we are root
// (PostgreSQL refuses to run as root).
func asPostgres(ctx context.Context, name string, args ...string) *exec.Cmd {
	if os.Geteuid() == 0 {
		return exec.CommandContext(ctx, "runuser", append([]string{"-u", "postgres", "--", name}, args...)...)
	}
	return exec.CommandContext(ctx, name, args...)
}

func (s *servers) startPostgres(ctx context.Context, settings []string) error {
	bin, err := postgresBin()
	if err != nil {
		return err
	}
	s.pgBin = bin
	home := filepath.Join(s.dir, "postgres")
	if err := os.Mkdir(home, 0o700); err != nil {
		return err
	}
	if os.Geteuid() == 0 {
		account, err := user.Lookup("postgres")
		if err != nil {
			return fmt.Errorf("user postgres: %w", err)
		}
		uid, _ := strconv.Atoi(account.Uid)
		gid, _ := strconv.Atoi(account.Gid)
		if err := os.Chmod(s.dir, 0o755); err != nil {
			return err
		}
		if err := os.Chown(home, uid, gid); err != nil {
			return err
		}
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	data := filepath.Join(home, "data")
	if out, err := asPostgres(ctx, filepath.Join(bin, "initdb"), "--pgdata", data, "--username", "postgres",
		"--auth", "trust", "--encoding", "UTF8", "--locale", "C", "--no-instructions").CombinedOutput(); err != nil {
		return fmt.Errorf("initdb: %w: %s", err, out)
	}
	s.pgData = data
	options := fmt.Sprintf("-p %d -c listen_addresses=127.0.0.1 -c unix_socket_directories=%s -c max_connections=200 -c track_commit_timestamp=on", port, home)
	for _, setting := range settings {
		options += " -c " + setting
	}
	if out, err := asPostgres(ctx, filepath.Join(bin, "pg_ctl"), "--pgdata", data, "--log", filepath.Join(home, "postgres.log"),
		"--options", options, "--wait", "--timeout", "60", "start").CombinedOutput(); err != nil {
		return fmt.Errorf("pg_ctl start: %w: %s (log in %s)", err, out, filepath.Join(home, "postgres.log"))
	}
	url := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
	if err := waitFor(ctx, 30*time.Second, func() error {
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			return err
		}
		return conn.Close(ctx)
	}); err != nil {
		return fmt.Errorf("postgres on port %d: %w", port, err)
	}
	s.databaseURL = url
	return nil
}

func waitFor(ctx context.Context, timeout time.Duration, ready func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := ready()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// stop stops what startServers started and removes its directory.
func (s *servers) stop() {
	if s.pgData != "" {
		_ = asPostgres(context.Background(), filepath.Join(s.pgBin, "pg_ctl"), "--pgdata", s.pgData,
			"--mode", "immediate", "--wait", "stop").Run()
	}
	if s.redis != nil && s.redis.Process != nil {
		client := redis.NewClient(&redis.Options{Addr: s.redisAddr, MaxRetries: -1})
		_ = client.ShutdownNoSave(context.Background()).Err()
		_ = client.Close()
		done := make(chan struct{})
		go func() { _ = s.redis.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = s.redis.Process.Kill()
			<-done
		}
	}
	if s.dir != "" {
		_ = os.RemoveAll(s.dir)
	}
}

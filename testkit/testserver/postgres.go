package testserver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/ordergate/ordergate/migrations"
)

const (
	postgresStartTimeout = 90 * time.Second // initdb and start share two cores with other test binaries
	postgresStopGrace    = 30 * time.Second
	postgresAdminTimeout = 60 * time.Second
)

// PostgresDatabase is an empty database, created for one test on the shared
// server. (The type cannot share the name of the Postgres function.)
type PostgresDatabase struct {
	URL  string // postgres://postgres@127.0.0.1:port/name?sslmode=disable
	Name string
}

// PostgresInstance is the PostgreSQL server shared by all tests of one test
// binary. Starting a server per test would cost seconds each; a database per
// test gives the same isolation for milliseconds.
type PostgresInstance struct {
	Addr string // "127.0.0.1:port"
	Dir  string // data directory

	port       int
	baseDir    string
	socketDir  string
	binDir     string
	credential *syscall.Credential
	// createStrategy is " STRATEGY FILE_COPY" where the server has it
	// (PostgreSQL 15+): with fsync off it creates a database in ~50 ms,
	// against ~300 ms for the default WAL_LOG copy.
	createStrategy string

	mu      sync.Mutex
	process *serverProcess // nil while stopped

	templateMu    sync.Mutex
	templateReady bool // template_migrated is at the newest schema
}

var (
	sharedPostgres struct {
		once     sync.Once
		instance *PostgresInstance
		err      error
	}

	databaseCounter atomic.Int64
)

func shutDownSharedPostgres() error {
	server := sharedPostgres.instance // all tests have returned: no concurrent access
	if server == nil {
		return nil
	}
	stopErr := server.stop()
	if err := os.RemoveAll(server.baseDir); err != nil {
		stopErr = errors.Join(stopErr, fmt.Errorf("remove %s: %w", server.baseDir, err))
	}
	return stopErr
}

// PostgresServer returns the shared server, starting it if needed, so outage
// tests can Stop and Start it. If a test leaves it stopped, it is started
// again at t.Cleanup so that later tests are unaffected. A test that stops
// the server must not run in parallel with other Postgres tests of its
// package.
func PostgresServer(t testing.TB) *PostgresInstance {
	t.Helper()
	server := startedSharedPostgres(t)
	t.Cleanup(func() {
		if err := server.start(); err != nil {
			t.Errorf("testserver: restart postgres after test: %v", err)
		}
	})
	return server
}

func startedSharedPostgres(t testing.TB) *PostgresInstance {
	t.Helper()
	requireMain(t, "Postgres")
	sharedPostgres.once.Do(func() {
		sharedPostgres.instance, sharedPostgres.err = newPostgresInstance()
	})
	if sharedPostgres.err != nil {
		t.Fatalf("testserver: start postgres: %v", sharedPostgres.err)
	}
	return sharedPostgres.instance
}

// Postgres creates a new empty database on the shared server and drops it at
// t.Cleanup.
func Postgres(t testing.TB) *PostgresDatabase {
	t.Helper()
	return startedSharedPostgres(t).createDatabase(t, "")
}

// createDatabase creates a database for t, with the clauses of CREATE
// DATABASE in from (a TEMPLATE, or nothing), and drops it at t.Cleanup.
func (s *PostgresInstance) createDatabase(t testing.TB, from string) *PostgresDatabase {
	t.Helper()
	name := uniqueDatabaseName(t.Name())
	if err := s.exec("CREATE DATABASE " + pgx.Identifier{name}.Sanitize() + from + s.createStrategy); err != nil {
		t.Fatalf("testserver: create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		// FORCE: connections a test forgot to close must not keep its
		// database alive.
		if err := s.exec("DROP DATABASE IF EXISTS " + pgx.Identifier{name}.Sanitize() + " WITH (FORCE)"); err != nil {
			t.Errorf("testserver: drop database %s: %v", name, err)
		}
	})
	return &PostgresDatabase{URL: s.url(name), Name: name}
}

// Pool returns a pgx pool connected to the database, closed at t.Cleanup.
func (p *PostgresDatabase) Pool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), postgresAdminTimeout)
	defer cancel()
	pool, err := pgxpool.New(ctx, p.URL)
	if err != nil {
		t.Fatalf("testserver: connect to %s: %v", p.Name, err)
	}
	t.Cleanup(pool.Close)
	if err := pool.Ping(ctx); err != nil {
		t.Fatalf("testserver: ping %s: %v", p.Name, err)
	}
	return pool
}

var notIdentifierChars = regexp.MustCompile(`[^a-z0-9]+`)

// uniqueDatabaseName keeps part of the test name so a database left behind by
// a crash can be traced to its test; the counter makes it unique within the
// server, which belongs to this test binary alone.
func uniqueDatabaseName(testName string) string {
	readable := strings.Trim(notIdentifierChars.ReplaceAllString(strings.ToLower(testName), "_"), "_")
	const maxReadable = 40 // identifiers are limited to 63 bytes
	if len(readable) > maxReadable {
		readable = readable[:maxReadable]
	}
	return fmt.Sprintf("test_%s_%d", readable, databaseCounter.Add(1))
}

// Stop shuts the server down now (fast shutdown: open sessions are
// disconnected), as an outage would. It does nothing if already stopped.
func (s *PostgresInstance) Stop(t testing.TB) {
	t.Helper()
	if err := s.stop(); err != nil {
		t.Fatalf("testserver: stop postgres: %v", err)
	}
}

// Start starts the server again on the same port and data directory. It does
// nothing if the server is running.
func (s *PostgresInstance) Start(t testing.TB) {
	t.Helper()
	if err := s.start(); err != nil {
		t.Fatalf("testserver: start postgres: %v", err)
	}
}

func newPostgresInstance() (*PostgresInstance, error) {
	binDir, err := postgresBinDir()
	if err != nil {
		return nil, err
	}
	credential, err := postgresCredential()
	if err != nil {
		return nil, err
	}
	baseDir, err := os.MkdirTemp("", "ordergate-pg-")
	if err != nil {
		return nil, fmt.Errorf("create temp dir: %w", err)
	}
	server := &PostgresInstance{
		Dir:        filepath.Join(baseDir, "data"),
		baseDir:    baseDir,
		socketDir:  filepath.Join(baseDir, "socket"),
		binDir:     binDir,
		credential: credential,
	}
	if err := server.initialize(); err != nil {
		_ = os.RemoveAll(baseDir)
		return nil, err
	}
	for attempt := 0; attempt < startAttempts; attempt++ {
		if server.port, err = freePort(); err != nil {
			break
		}
		server.Addr = addr(server.port)
		if err = server.start(); err == nil {
			if err = server.chooseCreateStrategy(); err == nil {
				return server, nil
			}
			_ = server.stop()
			break
		}
		if !strings.Contains(err.Error(), "in use") {
			break
		}
	}
	_ = os.RemoveAll(baseDir)
	return nil, err
}

// postgresBinDir prefers a postgres on PATH and otherwise the newest Debian
// installation, whose server binaries live outside PATH.
func postgresBinDir() (string, error) {
	var fallbackDirs []string
	installed, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(installed, func(i, j int) bool {
		return postgresMajor(installed[i]) > postgresMajor(installed[j])
	})
	fallbackDirs = append(fallbackDirs, installed...)
	path, err := findBinary("postgres", fallbackDirs...)
	if err != nil {
		return "", err
	}
	// PATH may hold a lone symlink to the server; its tools are beside the target.
	if resolved, err := filepath.EvalSymlinks(path); err == nil {
		path = resolved
	}
	binDir := filepath.Dir(path)
	if _, err := os.Stat(filepath.Join(binDir, "initdb")); err != nil {
		return "", fmt.Errorf("initdb not found next to %s: %s", path, installHint)
	}
	return binDir, nil
}

func postgresMajor(binDir string) int {
	major, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return major
}

// postgresCredential returns the user to run PostgreSQL as: the server
// refuses to run as root. Setting the credential on the child directly,
// rather than going through runuser, keeps the postmaster our direct child,
// so signals and the parent-death signal reach it.
func postgresCredential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	account, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("running as root needs a postgres user to run the server as: %w; %s", err, installHint)
	}
	uid, err := strconv.ParseUint(account.Uid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("parse uid of postgres user: %w", err)
	}
	gid, err := strconv.ParseUint(account.Gid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("parse gid of postgres user: %w", err)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

func (s *PostgresInstance) initialize() error {
	if err := os.Mkdir(s.socketDir, 0o700); err != nil {
		return fmt.Errorf("create socket dir: %w", err)
	}
	if s.credential != nil {
		for _, dir := range []string{s.baseDir, s.socketDir} {
			if err := os.Chown(dir, int(s.credential.Uid), int(s.credential.Gid)); err != nil {
				return fmt.Errorf("chown %s to postgres: %w", dir, err)
			}
		}
	}
	return runToCompletion("initdb", processSpec{
		path: filepath.Join(s.binDir, "initdb"),
		args: []string{
			"--pgdata", s.Dir,
			"--username", "postgres",
			"--auth", "trust",
			"--encoding", "UTF8",
			"--locale", "C",
			"--no-sync", // throwaway data: skip the fsyncs that dominate initdb's time
			"--no-instructions",
		},
		workDir:    s.baseDir, // the postgres user may not be able to enter the caller's directory
		logPath:    filepath.Join(s.baseDir, "initdb.log"),
		credential: s.credential,
	}, postgresStartTimeout)
}

func (s *PostgresInstance) start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.process != nil {
		return nil
	}
	process, err := startServerProcess("postgres "+s.Addr, processSpec{
		path: filepath.Join(s.binDir, "postgres"),
		args: []string{
			"-D", s.Dir,
			"-c", "port=" + strconv.Itoa(s.port),
			"-c", "listen_addresses=127.0.0.1",
			"-c", "unix_socket_directories=" + s.socketDir,
			// Durability is worthless for throwaway data and costs most of
			// the time of a write-heavy test.
			"-c", "fsync=off",
			"-c", "synchronous_commit=off",
			"-c", "full_page_writes=off",
			// Tests run in parallel, each with its own pool.
			"-c", "max_connections=300",
		},
		workDir:    s.baseDir,
		logPath:    filepath.Join(s.baseDir, "postgres.log"),
		credential: s.credential,
	})
	if err != nil {
		return err
	}
	if err := process.waitUntilReady(postgresStartTimeout, s.ping); err != nil {
		_ = process.stop(syscall.SIGKILL, time.Second)
		return err
	}
	s.process = process
	return nil
}

func (s *PostgresInstance) stop() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.process == nil {
		return nil
	}
	// SIGINT is PostgreSQL's fast shutdown (pg_ctl stop -m fast).
	err := s.process.stop(syscall.SIGINT, postgresStopGrace)
	s.process = nil
	return err
}

func (s *PostgresInstance) url(database string) string {
	return "postgres://postgres@" + s.Addr + "/" + database + "?sslmode=disable"
}

func (s *PostgresInstance) ping() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.url("postgres"))
	if err != nil {
		return err
	}
	return conn.Close(ctx)
}

func (s *PostgresInstance) chooseCreateStrategy() error {
	ctx, cancel := context.WithTimeout(context.Background(), postgresAdminTimeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.url("postgres"))
	if err != nil {
		return fmt.Errorf("connect to postgres at %s: %w", s.Addr, err)
	}
	defer conn.Close(ctx)
	var version int
	if err := conn.QueryRow(ctx, "SELECT current_setting('server_version_num')::int").Scan(&version); err != nil {
		return fmt.Errorf("read server version: %w", err)
	}
	if version >= 150000 {
		s.createStrategy = " STRATEGY FILE_COPY"
	}
	return nil
}

// exec runs an administrative statement on a connection of its own, so it
// works across a Stop/Start of the server.
func (s *PostgresInstance) exec(statement string) error {
	ctx, cancel := context.WithTimeout(context.Background(), postgresAdminTimeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.url("postgres"))
	if err != nil {
		return fmt.Errorf("connect to postgres at %s: %w", s.Addr, err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, statement); err != nil {
		return fmt.Errorf("%s: %w", statement, err)
	}
	return nil
}

// MigratedPostgres is Postgres with every migration applied: a fresh
// database at the newest schema. It is a copy of a template database that
// the first call migrates: copying takes ~0.1 s, migrating ~0.6-1 s under
// -race, and the suites create hundreds.
func MigratedPostgres(t testing.TB) *PostgresDatabase {
	t.Helper()
	server := startedSharedPostgres(t)
	template, err := server.migratedTemplate()
	if err != nil {
		t.Fatalf("testserver: %v", err)
	}
	return server.createDatabase(t, " TEMPLATE "+pgx.Identifier{template}.Sanitize())
}

// migratedTemplate is the name of a database at the newest schema, made on
// the first call. Nothing connects to it after: PostgreSQL copies a template
// only while no session is in it. A failed attempt (the server stopped by
// an outage test) is tried again by the next call.
func (s *PostgresInstance) migratedTemplate() (string, error) {
	s.templateMu.Lock()
	defer s.templateMu.Unlock()
	const name = "template_migrated"
	if s.templateReady {
		return name, nil
	}
	identifier := pgx.Identifier{name}.Sanitize()
	if err := s.exec("DROP DATABASE IF EXISTS " + identifier + " WITH (FORCE)"); err != nil {
		return "", fmt.Errorf("migrated template: %w", err)
	}
	if err := s.exec("CREATE DATABASE " + identifier + s.createStrategy); err != nil {
		return "", fmt.Errorf("migrated template: %w", err)
	}
	if err := migrations.Up(s.url(name)); err != nil {
		return "", fmt.Errorf("migrate the template %s: %w", name, err)
	}
	s.templateReady = true
	return name, nil
}

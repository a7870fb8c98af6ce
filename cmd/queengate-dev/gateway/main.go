// Command gateway is the development gateway that `go run ./cmd/queengate-dev`
// builds and runs (the launcher in the parent directory says first that the
// build takes minutes). Run on its own it does the same.
//
// It uses QUEENGATE_DATABASE_URL when set, else starts a throwaway
// PostgreSQL from the machine's server binaries; applies the migrations;
// seeds a dev tenant, cluster and API key; and forwards to the broker at
// QUEENGATE_BROKER_URL (default http://127.0.0.1:6632). When nothing answers
// there it starts the in-memory fake broker as a clearly labelled
// development upstream, so pushes and pops work at once. The fake broker
// has no tenancy by default, like the public Queen 0.15 broker, so the
// evaluation shows what production on that broker will: its cell serves
// one cluster. QUEENGATE_DEV_TENANCY=header makes it scope by
// x-queen-tenant, like a broker started with QUEEN_TENANCY_HEADER=true. It also serves the
// identity surface and the cluster console, with a dev admin whose generated
// password it prints once; the dev admin is an operator, so the console's
// fleet view (every cell, tenant and cluster) is open to it. It prints
// ready curl lines, the console's and the fleet's URLs and the
// `caddy queen usage` line for the dev cluster, and runs until interrupted.
package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	_ "github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	_ "github.com/caddyserver/caddy/v2/modules/standard"
	"github.com/jackc/pgx/v5/pgxpool"

	_ "github.com/queengate/queengate/caddymodule"
	"github.com/queengate/queengate/internal/fakebroker"
	"github.com/queengate/queengate/internal/pgserver"
	"github.com/queengate/queengate/migrations"
	"github.com/queengate/queengate/tenancy"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "queengate-dev:", err)
		os.Exit(1)
	}
}

func run() error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	port := envOr("QUEENGATE_HTTP_PORT", "8080")
	brokerURL := envOr("QUEENGATE_BROKER_URL", "http://127.0.0.1:6632")

	dbURL := os.Getenv("QUEENGATE_DATABASE_URL")
	if dbURL == "" {
		fmt.Println("No QUEENGATE_DATABASE_URL: starting a throwaway PostgreSQL ...")
		if err := pgserver.EnsureInstalled(ctx, os.Stdout); err != nil {
			return err
		}
		srv, err := pgserver.Start(ctx, pgserver.Options{})
		if err != nil {
			return err
		}
		defer srv.Close()
		if err := srv.CreateDatabase(ctx, "queengate"); err != nil {
			return err
		}
		dbURL = srv.URL("queengate")
	}

	mode, err := devTenancy()
	if err != nil {
		return err
	}
	if wanted := brokerURL; !answers(wanted) {
		broker := fakebroker.New(fakebroker.Options{Name: "dev-fake-broker", IgnoreTenant: !mode.scoped})
		u, err := url.Parse(brokerURL)
		if err != nil {
			return fmt.Errorf("QUEENGATE_BROKER_URL: %w", err)
		}
		listenURL, err := broker.Listen(u.Host)
		if err != nil {
			listenURL, err = broker.Start()
			if err != nil {
				return fmt.Errorf("start the fake broker: %w", err)
			}
		}
		defer broker.Close()
		brokerURL = listenURL
		fmt.Printf("\n*** Nothing answers at %s: using the IN-MEMORY FAKE BROKER at %s.\n", wanted, brokerURL)
		fmt.Println("*** It is a development upstream only: messages live in memory and vanish on exit.")
		fmt.Println("*** " + mode.label)
	} else {
		fmt.Printf("\nForwarding to the broker at %s; each gateway probes whether it scopes by x-queen-tenant (docs/isolation.md).\n", brokerURL)
	}

	creds, err := seed(ctx, dbURL, brokerURL)
	if err != nil {
		return err
	}
	// Sessions are signed with a secret that lives as long as this process:
	// a restart signs everyone out, which is what a dev gateway wants.
	sessionSecret, err := randomText(32)
	if err != nil {
		return err
	}

	caddyfile := fmt.Sprintf(`{
	admin off
	persist_config off
	http_port %s
	default_bind 127.0.0.1
	queen {
		database_url %s
		base_domain localhost
		operator_enabled
		session {
			hs256_secret %s
		}
		identity {
			operator_api
		}
	}
}
http:// {
	queen_gateway {
		shared_hosts 127.0.0.1
	}
}
`, port, dbURL, sessionSecret)
	cfg, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(caddyfile), nil)
	if err != nil {
		return fmt.Errorf("adapt the dev Caddyfile: %w", err)
	}
	if err := caddy.Load(cfg, true); err != nil {
		return fmt.Errorf("start caddy: %w", err)
	}
	defer caddy.Stop()

	fmt.Printf(`
queengate is running: cluster "dev" at http://dev.localhost:%[1]s (forwarding to %[2]s)
Dev API key (shown once): %[3]s

SDK (url and bearerToken): http://127.0.0.1:%[1]s with the key as the bearer token; 127.0.0.1 serves every
cluster, the key naming its own (Node, Python and Go do not resolve *.localhost). docs/connect.md has the snippets.
  export QUEEN_API_KEY=%[3]s
Push:
  curl -sS -H "Authorization: Bearer $QUEEN_API_KEY" -H 'Content-Type: application/json' \
    -d '{"items":[{"queue":"hello","payload":{"msg":"hi"}}]}' http://127.0.0.1:%[1]s/api/v1/push
Pop:
  curl -sS -H "Authorization: Bearer $QUEEN_API_KEY" 'http://127.0.0.1:%[1]s/api/v1/pop/queue/hello?batch=10'

Plan of the dev cluster: %[7]s

Console (sign in, connect, keys, members, usage charts): http://dev.localhost:%[1]s/console/
Fleet (every cell, tenant and cluster; the dev admin is an operator): http://dev.localhost:%[1]s/console/fleet
Dev admin: %[4]s
Dev admin password (shown once): %[5]s

Usage of the dev cluster, as billed (written a minute or so after the traffic), from another terminal:
  %[6]s

Press Ctrl-C to stop.
`, port, brokerURL, creds.key, devAdminEmail, creds.password, usageLine(dbURL), devLimitsLine)
	<-ctx.Done()
	fmt.Println("\nstopping")
	return nil
}

// fakeTenancy is the mode the dev command's fake broker runs in.
type fakeTenancy struct {
	scoped bool   // keeps a namespace per x-queen-tenant
	label  string // what the banner says about it
}

// devTenancy reads QUEENGATE_DEV_TENANCY: "none" (the default, the public
// broker's mode) or "header".
func devTenancy() (fakeTenancy, error) {
	switch v := os.Getenv("QUEENGATE_DEV_TENANCY"); v {
	case "", "none":
		return fakeTenancy{label: "Mode: NO TENANCY, like the public Queen 0.15 broker: it ignores x-queen-tenant, " +
			"so its cell serves one cluster (dev): the gateway's probe finds it unscoped and the cell takes no second cluster. " +
			"QUEENGATE_DEV_TENANCY=header runs it like a broker started with QUEEN_TENANCY_HEADER=true."}, nil
	case "header":
		return fakeTenancy{scoped: true, label: "Mode: TENANCY BY x-queen-tenant, like a broker started with " +
			"QUEEN_TENANCY_HEADER=true: its cell can hold many clusters. The public Queen 0.15 broker has no tenancy; " +
			"unset QUEENGATE_DEV_TENANCY to see what the gateway does in front of it."}, nil
	default:
		return fakeTenancy{}, fmt.Errorf("QUEENGATE_DEV_TENANCY=%q: want none (the default) or header", v)
	}
}

// devLimitOverrides are the dev cluster's limits over the dev plan: a
// consumer may pop a full batch and acknowledge each message on its own
// without a 429.
const devLimitOverrides = `{"max_req_per_sec": 500, "req_burst": 2000, "max_msgs_per_sec": 5000, "msgs_burst": 20000}`

// devLimitsLine says what devLimitOverrides allow, in the banner.
const devLimitsLine = "dev, with room for development: 500 requests/s (burst 2000), 5000 messages/s (burst 20000), " +
	"batches of up to 2000 items (`caddy queen cluster override dev` shows and changes them)."

// devAdminEmail is the dev cluster's admin, who signs in to the console.
const devAdminEmail = "admin@dev.localhost"

// devCredentials are the secrets seed made for this run, printed once.
type devCredentials struct {
	key      string // a full-scope API key of the dev cluster
	password string // devAdminEmail's password
}

// usageLine is the `caddy queen usage` command for the dev cluster, run from
// the repository root. A database URL from the environment is not printed
// (it may hold a password): the command reads the same variable.
func usageLine(dbURL string) string {
	const cmd = "go run ./cmd/caddy queen usage --cluster dev"
	if os.Getenv("QUEENGATE_DATABASE_URL") != "" {
		return cmd
	}
	return cmd + " --database-url '" + dbURL + "'"
}

// randomText returns n random bytes as unpadded base64url.
func randomText(n int) (string, error) {
	raw := make([]byte, n)
	if _, err := rand.Read(raw); err != nil {
		return "", fmt.Errorf("random bytes: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(raw), nil
}

// seed applies the migrations and provisions the dev cell, tenant, cluster,
// a fresh full-scope API key and the dev admin (with a fresh password, also
// when the admin exists) through the control-plane SQL functions.
func seed(ctx context.Context, dbURL, brokerURL string) (devCredentials, error) {
	var creds devCredentials
	var err error
	if creds.key, err = seedKey(ctx, dbURL, brokerURL); err != nil {
		return creds, err
	}
	if creds.password, err = randomText(18); err != nil {
		return creds, err
	}
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		return creds, fmt.Errorf("connect to %s: %w", dbURL, err)
	}
	defer pool.Close()
	// bcrypt through pgcrypto, as `caddy queen user create` stores passwords.
	if _, err := pool.Exec(ctx, `
		WITH t AS (SELECT id FROM queen_proxy.tenants WHERE slug = 'dev'),
		     updated AS (UPDATE queen_proxy.users SET password_hash = public.crypt($2, public.gen_salt('bf', 10))
		                 WHERE email = $1 RETURNING id)
		SELECT queen_proxy.create_user((SELECT id FROM t), $1, public.crypt($2, public.gen_salt('bf', 10)), 'local')
		WHERE NOT EXISTS (SELECT 1 FROM updated)`, devAdminEmail, creds.password); err != nil {
		return creds, fmt.Errorf("seed the dev admin: %w", err)
	}
	if _, err := pool.Exec(ctx, `SELECT queen_proxy.grant_cluster_role(
		(SELECT id FROM queen_proxy.clusters WHERE slug = 'dev'), $1, 'admin')`, devAdminEmail); err != nil {
		return creds, fmt.Errorf("grant the dev admin its role: %w", err)
	}
	// The dev admin is also the platform's operator, so the fleet view is
	// one click away in the console.
	if _, err := pool.Exec(ctx, `SELECT queen_proxy.set_operator($1, true)
		WHERE NOT (SELECT is_operator FROM queen_proxy.users WHERE email = $1)`, devAdminEmail); err != nil {
		return creds, fmt.Errorf("make the dev admin an operator: %w", err)
	}
	return creds, nil
}

// seedKey applies the migrations and provisions the dev cell, tenant,
// cluster and a fresh full-scope API key.
func seedKey(ctx context.Context, dbURL, brokerURL string) (string, error) {
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		return "", fmt.Errorf("connect to %s: %w", dbURL, err)
	}
	defer pool.Close()
	if _, err := migrations.Apply(ctx, pool); err != nil {
		return "", err
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		return "", err
	}
	defer tx.Rollback(ctx)
	var cellID, tenantID, clusterID string
	if err := tx.QueryRow(ctx, `INSERT INTO queen_proxy.cells (slug, region, base_url, class)
		VALUES ('dev-local', 'local', $1, 'shared')
		ON CONFLICT (slug) DO UPDATE SET base_url = EXCLUDED.base_url RETURNING id::text`, brokerURL).Scan(&cellID); err != nil {
		return "", fmt.Errorf("seed cell: %w", err)
	}
	err = tx.QueryRow(ctx, `SELECT id::text FROM queen_proxy.tenants WHERE slug = 'dev'`).Scan(&tenantID)
	if err != nil {
		if err := tx.QueryRow(ctx, `SELECT queen_proxy.create_tenant('dev', 'Dev Tenant')::text`).Scan(&tenantID); err != nil {
			return "", fmt.Errorf("seed tenant: %w", err)
		}
	}
	err = tx.QueryRow(ctx, `SELECT id::text FROM queen_proxy.clusters WHERE slug = 'dev'`).Scan(&clusterID)
	if err != nil {
		if err := tx.QueryRow(ctx, `SELECT queen_proxy.create_cluster($1::uuid, 'dev', 'dev', $2::uuid)::text`,
			tenantID, cellID).Scan(&clusterID); err != nil {
			return "", fmt.Errorf("seed cluster: %w", err)
		}
	}
	// The dev plan's 10 requests/s (burst 50) throttles an SDK consumer that
	// acknowledges a batch one message at a time; the dev cluster gets room
	// for that, as an override that `caddy queen cluster override` shows and
	// changes, and which a later run leaves alone once set.
	if _, err := tx.Exec(ctx, `SELECT queen_proxy.set_limit_override(id, $2::jsonb)
		FROM queen_proxy.clusters WHERE id = $1::uuid AND coalesce(limit_overrides, '{}'::jsonb) = '{}'::jsonb`,
		clusterID, devLimitOverrides); err != nil {
		return "", fmt.Errorf("seed the dev cluster's limits: %w", err)
	}
	secret, err := randomText(32)
	if err != nil {
		return "", err
	}
	key := "qk_dev_" + secret
	if _, err := tx.Exec(ctx, `SELECT queen_proxy.issue_api_key($1::uuid, $2, $3, ARRAY['produce','consume','read','admin'])`,
		clusterID, "dev key "+time.Now().UTC().Format(time.RFC3339), tenancy.HashAPIKey(key)); err != nil {
		return "", fmt.Errorf("seed api key: %w", err)
	}
	return key, tx.Commit(ctx)
}

// answers reports whether a broker answers /health at base.
func answers(base string) bool {
	c := &http.Client{Timeout: time.Second}
	resp, err := c.Get(base + "/health")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

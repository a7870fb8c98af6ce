// Command queengate-dev builds and starts a working gateway on a fresh
// machine with one command:
//
//	go run ./cmd/queengate-dev
//
// It uses QUEENGATE_DATABASE_URL when set, else starts a throwaway
// PostgreSQL from the machine's server binaries; applies the migrations;
// seeds a dev tenant, cluster and API key; and forwards to the broker at
// QUEENGATE_BROKER_URL (default http://127.0.0.1:6632). When nothing answers
// there it starts the in-memory fake broker as a clearly labelled
// development upstream, so pushes and pops work at once. It prints a ready
// curl line and runs until interrupted.
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

	if wanted := brokerURL; !answers(wanted) {
		broker := fakebroker.New(fakebroker.Options{Name: "dev-fake-broker"})
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
	}

	key, err := seed(ctx, dbURL, brokerURL)
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
	}
}
http:// {
	queen_gateway
}
`, port, dbURL)
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

Push:
  curl -sS -H 'Host: dev.localhost' -H 'Authorization: Bearer %[3]s' -H 'Content-Type: application/json' \
    -d '{"items":[{"queue":"hello","payload":{"msg":"hi"}}]}' http://127.0.0.1:%[1]s/api/v1/push
Pop:
  curl -sS -H 'Host: dev.localhost' -H 'Authorization: Bearer %[3]s' 'http://127.0.0.1:%[1]s/api/v1/pop/queue/hello?batch=10'

Press Ctrl-C to stop.
`, port, brokerURL, key)
	<-ctx.Done()
	fmt.Println("\nstopping")
	return nil
}

// seed applies the migrations and provisions the dev cell, tenant, cluster
// and a fresh full-scope API key through the control-plane SQL functions.
func seed(ctx context.Context, dbURL, brokerURL string) (string, error) {
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
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return "", err
	}
	key := "qk_dev_" + base64.RawURLEncoding.EncodeToString(raw)
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

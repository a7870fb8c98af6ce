package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/queengate/queengate/internal/pgtest"
	"github.com/queengate/queengate/webhook"
)

// `caddy queen webhook …` through the real binary: every subcommand, its
// JSON, and the refusals of bad input (exit 1, one line on stderr).
func TestCLIWebhooks(t *testing.T) {
	url := pgtest.URL(t)
	cp := newControlPlane(t, url)
	q := cliFor(t)(url)

	var added struct {
		Name, URL, Status, Secret string
		Events                    []string
	}
	q.okJSON(t, &added, "webhook", "add", "billing", "--url", "https://hooks.example.com/queen",
		"--events", "api_key_issued,cluster_status_changed")
	if added.Name != "billing" || added.Status != "active" || !strings.HasPrefix(added.Secret, "whsec_") ||
		strings.Join(added.Events, ",") != "api_key_issued,cluster_status_changed" {
		t.Fatalf("add: %+v", added)
	}
	if _, err := webhook.ParseSecret(added.Secret); err != nil {
		t.Fatalf("add printed secret %q: %v", added.Secret, err)
	}
	out := q.ok(t, "webhook", "add", "audit", "--url", "https://audit.example.com/hook")
	if !strings.Contains(out, `added webhook endpoint "audit" for every event`) || !strings.Contains(out, "whsec_") {
		t.Fatalf("add output:\n%s", out)
	}
	q.fails(t, 1, `queen webhook add: unknown event "key_made" (known: `+strings.Join(webhook.KindNames(), ", ")+")\n",
		"webhook", "add", "x", "--url", "https://hooks.example.com/", "--events", "key_made")
	q.fails(t, 1, `queen webhook add: URL "https://u:p@hooks.example.com/" carries user information; put credentials in the receiver's check of the signature instead`+"\n",
		"webhook", "add", "x", "--url", "https://u:p@hooks.example.com/")
	q.fails(t, 1, "queen webhook add: webhook endpoint name \"billing\" is already taken\n",
		"webhook", "add", "billing", "--url", "https://hooks.example.com/")

	rows := lines(q.ok(t, "webhook", "list"))
	if len(rows) != 3 || rows[0][0] != "NAME" || rows[1][0] != "audit" || rows[1][2] != "all" || rows[2][0] != "billing" {
		t.Fatalf("list: %v", rows)
	}

	var upd struct{ Status string }
	q.okJSON(t, &upd, "webhook", "update", "billing", "--disable")
	if upd.Status != "disabled" {
		t.Fatalf("update --disable: %+v", upd)
	}
	q.okJSON(t, &upd, "webhook", "update", "billing", "--enable", "--all-events")
	if upd.Status != "active" {
		t.Fatalf("update --enable: %+v", upd)
	}
	q.fails(t, 1, "queen webhook update: nothing to change: give --url, --events, --all-events, --enable or --disable\n",
		"webhook", "update", "billing")

	var rot struct {
		Secret              string
		PreviousSecretUntil *time.Time `json:"previous_secret_until"`
	}
	q.okJSON(t, &rot, "webhook", "rotate-secret", "billing", "--overlap", "1h")
	if rot.Secret == added.Secret || rot.PreviousSecretUntil == nil || time.Until(*rot.PreviousSecretUntil) < 50*time.Minute {
		t.Fatalf("rotate-secret: %+v", rot)
	}

	cp.exec(`SELECT queen_proxy.emit_outbox('cell_removed', '{}')`)
	var replay struct{ Queued int }
	q.okJSON(t, &replay, "webhook", "replay", "billing", "--since", time.Now().Add(-time.Hour).UTC().Format(time.RFC3339))
	if replay.Queued < 2 { // the disabling, and cell_removed
		t.Fatalf("replay queued %d", replay.Queued)
	}
	q.fails(t, 1, "queen webhook replay: give an event id or a start time, not both and not neither\n", "webhook", "replay", "billing")

	if rows := lines(q.ok(t, "webhook", "attempts", "billing")); len(rows) != 1 || rows[0][0] != "AT" {
		t.Fatalf("attempts before any delivery: %v", rows)
	}
	if out := q.ok(t, "webhook", "remove", "billing"); !strings.HasPrefix(out, `removed webhook endpoint "billing"`) {
		t.Fatalf("remove: %s", out)
	}
	q.fails(t, 1, "queen webhook remove: unknown webhook endpoint \"billing\"\n", "webhook", "remove", "billing")
}

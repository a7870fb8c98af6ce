package console

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"

	"github.com/queengate/queengate/controlplane"
	"github.com/queengate/queengate/internal/apierror"
	"github.com/queengate/queengate/internal/uuidtext"
	"github.com/queengate/queengate/tenancy"
)

type keyJSON struct {
	ID         string   `json:"id"`
	Name       string   `json:"name"`
	Scopes     []string `json:"scopes"`
	CreatedAt  string   `json:"created_at"`
	LastUsedAt *string  `json:"last_used_at"`
	RevokedAt  *string  `json:"revoked_at"`
	ExpiresAt  *string  `json:"expires_at"`
}

func timeJSON(t *time.Time) *string {
	if t == nil {
		return nil
	}
	s := t.UTC().Format(time.RFC3339)
	return &s
}

// listKeys is every key of the cluster, newest first; never a hash.
func (s *Surface) listKeys(w http.ResponseWriter, r *http.Request, c *caller) {
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	rows, err := s.o.Pool.Query(ctx, `SELECT id::text, name, scopes, created_at, last_used_at, revoked_at, expires_at
		FROM queen_proxy.api_keys WHERE cluster_id = $1::uuid ORDER BY created_at DESC, id`, c.cluster.ID)
	if err != nil {
		writeError(w, errDatabase)
		return
	}
	keys, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (keyJSON, error) {
		var k keyJSON
		var created time.Time
		var used, revoked, expires *time.Time
		err := row.Scan(&k.ID, &k.Name, &k.Scopes, &created, &used, &revoked, &expires)
		k.CreatedAt = created.UTC().Format(time.RFC3339)
		k.LastUsedAt, k.RevokedAt, k.ExpiresAt = timeJSON(used), timeJSON(revoked), timeJSON(expires)
		if k.Scopes == nil {
			k.Scopes = []string{}
		}
		return k, err
	})
	if err != nil {
		writeError(w, errDatabase)
		return
	}
	if keys == nil {
		keys = []keyJSON{}
	}
	writeJSON(w, http.StatusOK, keys)
}

// readJSON decodes a small JSON body into v.
func readJSON(r *http.Request, v any) *apierror.Error {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return errBodyTooLarge
		}
		return invalid("the request body could not be read")
	}
	if len(strings.TrimSpace(string(body))) == 0 {
		return invalid("a JSON body is required")
	}
	if err := json.Unmarshal(body, v); err != nil {
		return invalid("the request body is not the JSON object this route takes")
	}
	return nil
}

// createKey issues a key through issue_api_key and shows its plaintext
// once.
func (s *Surface) createKey(w http.ResponseWriter, r *http.Request, c *caller) {
	name, scopes, e := readKeyRequest(r)
	if e != nil {
		writeError(w, e)
		return
	}
	plaintext, hash, err := tenancy.NewAPIKey("live")
	if err != nil {
		writeError(w, errInternal)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	var id string
	var created time.Time
	err = pgx.BeginFunc(ctx, s.o.Pool, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `SELECT queen_proxy.issue_api_key($1::uuid, $2, $3, $4::text[])::text`,
			c.cluster.ID, name, hash, scopes).Scan(&id); err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, `SELECT created_at FROM queen_proxy.api_keys WHERE id = $1::uuid`, id).Scan(&created); err != nil {
			return err
		}
		return s.audit(ctx, tx, c, "console_api_key_issued", id, map[string]any{"name": name, "scopes": scopes})
	})
	if s.standingWithdrawn(w, err) {
		return
	}
	if err != nil {
		s.o.Log.Error("api key not issued", zap.String("cluster", c.cluster.Slug), zap.Error(err))
		writeError(w, errDatabase)
		return
	}
	s.changed(c.cluster.ID)
	writeJSON(w, http.StatusCreated, map[string]any{
		"id": id, "key": plaintext, "name": name, "scopes": scopes, "created_at": created.UTC().Format(time.RFC3339),
	})
}

// readKeyRequest reads {"name", "scopes"} of a key to issue, checked as
// the CLI and the provisioning API check them.
func readKeyRequest(r *http.Request) (string, []string, *apierror.Error) {
	var req struct {
		Name   string   `json:"name"`
		Scopes []string `json:"scopes"`
	}
	if e := readJSON(r, &req); e != nil {
		return "", nil, e
	}
	name, err := controlplane.CheckKeyName(req.Name)
	if err != nil {
		return "", nil, argInvalid("name", err)
	}
	scopes, err := controlplane.CheckScopes(req.Scopes)
	if err != nil {
		return "", nil, argInvalid("scopes", err)
	}
	return name, scopes, nil
}

var errNoSuchKey = notFound("no such active api key on this cluster")

// revokeKey revokes a live key, but only one of the caller's cluster:
// revoke_api_key itself takes any key id.
func (s *Surface) revokeKey(w http.ResponseWriter, r *http.Request, c *caller, id string) {
	id = strings.ToLower(id)
	if !uuidtext.ValidLower(id) {
		writeError(w, invalid("malformed key id"))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	found := true
	err := pgx.BeginFunc(ctx, s.o.Pool, func(tx pgx.Tx) error {
		var name string
		err := tx.QueryRow(ctx, `SELECT name FROM queen_proxy.api_keys
			WHERE id = $1::uuid AND cluster_id = $2::uuid AND revoked_at IS NULL FOR UPDATE`, id, c.cluster.ID).Scan(&name)
		if errors.Is(err, pgx.ErrNoRows) {
			found = false
			return nil
		}
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `SELECT queen_proxy.revoke_api_key($1::uuid)`, id); err != nil {
			return err
		}
		return s.audit(ctx, tx, c, "console_api_key_revoked", id, map[string]any{"name": name})
	})
	if s.standingWithdrawn(w, err) {
		return
	}
	if err != nil {
		s.o.Log.Error("api key not revoked", zap.String("cluster", c.cluster.Slug), zap.Error(err))
		writeError(w, errDatabase)
		return
	}
	if !found {
		writeError(w, errNoSuchKey)
		return
	}
	s.changed(c.cluster.ID)
	writeJSON(w, http.StatusOK, map[string]bool{"ok": true})
}

// audit writes the console's own audit row (actor user, the caller), next
// to the SQL function's control-plane row.
func (s *Surface) audit(ctx context.Context, tx pgx.Tx, c *caller, action, target string, meta map[string]any) error {
	m, err := json.Marshal(meta)
	if err != nil {
		return err
	}
	_, err = tx.Exec(ctx, `SELECT queen_proxy.record_operation($1::uuid, $2::uuid, 'user', $3::uuid, $4, $5, $6::jsonb)`,
		c.cluster.TenantID, c.cluster.ID, c.claims.UserID, action, target, string(m))
	return err
}

// changed drops this process's cached answers about the cluster.
func (s *Surface) changed(clusterID string) {
	if s.o.OnClusterChanged != nil {
		s.o.OnClusterChanged(clusterID)
	}
	s.o.Identities.InvalidateCluster(clusterID)
}

package provision

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/queengate/queengate/controlplane"
)

// differs collects what an existing object has that an ensure asked
// otherwise, for the 409 that names it.
type differs []string

func (d *differs) check(field, have, want string) {
	if want != "" && have != want {
		*d = append(*d, fmt.Sprintf("%s is %q, not %q", field, have, want))
	}
}

func (d differs) err(noun, name string) error {
	if len(d) == 0 {
		return nil
	}
	return conflictf("%s %q exists and differs: %s", noun, name, strings.Join(d, "; "))
}

// listPlans answers every plan with its limits and features.
func listPlans(c *call) (answer, error) {
	ps, err := controlplane.ListPlans(c.ctx, c.tx)
	if err != nil {
		return answer{}, err
	}
	return ok(map[string]any{"plans": ps}), nil
}

// ensureTenant creates the tenant named by the path, or answers the one
// that exists when the request matches it.
func ensureTenant(c *call) (answer, error) {
	var req struct {
		Name string `json:"name"`
	}
	if err := c.decode(&req); err != nil {
		return answer{}, err
	}
	slug, err := controlplane.CheckSlug("tenant", c.param("tenant"))
	if err != nil {
		return answer{}, &fieldError{"tenant", err}
	}
	name := strings.TrimSpace(req.Name)
	t, err := controlplane.GetTenant(c.ctx, c.tx, slug)
	switch {
	case err == nil:
		var d differs
		d.check("name", t.Name, name)
		c.tenantID, c.target = t.ID, t.Slug
		return ok(t), d.err("tenant", slug)
	case controlplane.KindOf(err) != controlplane.NotFound:
		return answer{}, err
	}
	if t, err = controlplane.CreateTenant(c.ctx, c.tx, slug, name); err != nil {
		return answer{}, err
	}
	c.tenantID, c.target = t.ID, t.Slug
	return created(t), nil
}

func getTenant(c *call) (answer, error) {
	t, err := controlplane.GetTenant(c.ctx, c.tx, c.param("tenant"))
	if err != nil {
		return answer{}, err
	}
	c.tenantID, c.target = t.ID, t.Slug
	return ok(t), nil
}

// setTenantStatus moves a tenant to active, grace or suspended; one
// already there is answered unchanged.
func setTenantStatus(c *call) (answer, error) {
	var req struct {
		Status string `json:"status"`
	}
	if err := c.decode(&req); err != nil {
		return answer{}, err
	}
	t, err := controlplane.GetTenant(c.ctx, c.tx, c.param("tenant"))
	if err != nil {
		return answer{}, err
	}
	c.tenantID, c.target = t.ID, t.Slug
	if t.Status == req.Status {
		return ok(t), nil
	}
	if t, err = controlplane.SetTenantStatus(c.ctx, c.tx, t.ID, req.Status, false); err != nil {
		if controlplane.KindOf(err) == controlplane.Invalid {
			return answer{}, &fieldError{"status", err}
		}
		return answer{}, err
	}
	c.changed = append(c.changed, tenantClusters(c, t.ID)...)
	return ok(t), nil
}

// deleteTenant is the first step of a tenant's deletion: its traffic stops
// at every gateway and the answer lists the clusters to purge on their
// cells. A repeat answers the same plan.
func deleteTenant(c *call) (answer, error) {
	p, err := controlplane.BeginTenantDeletion(c.ctx, c.tx, c.param("tenant"))
	if err != nil {
		return answer{}, err
	}
	c.tenantID, c.target = p.Tenant.ID, p.Tenant.Slug
	c.changed = append(c.changed, tenantClusters(c, p.Tenant.ID)...)
	return ok(p), nil
}

// ensureCluster creates the cluster named by the path on the tenant and
// plan the body names, placed by the database unless a cell is named, or
// answers the one that exists when the request matches it.
func ensureCluster(c *call) (answer, error) {
	var req struct {
		Tenant string `json:"tenant"`
		Plan   string `json:"plan"`
		Cell   string `json:"cell"`
	}
	if err := c.decode(&req); err != nil {
		return answer{}, err
	}
	slug, err := controlplane.CheckSlug("cluster", c.param("cluster"))
	if err != nil {
		return answer{}, &fieldError{"cluster", err}
	}
	tenant, err := controlplane.CheckSlug("tenant", req.Tenant)
	if err != nil {
		return answer{}, &fieldError{"tenant", err}
	}
	plan, err := controlplane.CheckPlanCode(req.Plan)
	if err != nil {
		return answer{}, &fieldError{"plan", err}
	}
	cell := strings.ToLower(strings.TrimSpace(req.Cell))
	cl, err := controlplane.GetCluster(c.ctx, c.tx, slug)
	switch {
	case err == nil:
		var d differs
		d.check("tenant", cl.TenantSlug, tenant)
		d.check("plan", cl.PlanCode, plan)
		d.check("cell", cl.CellSlug, cell)
		c.tenantID, c.clusterID, c.target = cl.TenantID, cl.ID, cl.Slug
		return ok(cl), d.err("cluster", slug)
	case controlplane.KindOf(err) != controlplane.NotFound:
		return answer{}, err
	}
	cl, err = controlplane.CreateCluster(c.ctx, c.tx, controlplane.NewCluster{Tenant: tenant, Slug: slug, Plan: plan, Cell: cell})
	if err != nil {
		return answer{}, err
	}
	c.tenantID, c.clusterID, c.target = cl.TenantID, cl.ID, cl.Slug
	c.changed = append(c.changed, cl.ID)
	return created(cl), nil
}

func getCluster(c *call) (answer, error) {
	cl, err := controlplane.GetCluster(c.ctx, c.tx, c.param("cluster"))
	if err != nil {
		return answer{}, err
	}
	c.tenantID, c.clusterID, c.target = cl.TenantID, cl.ID, cl.Slug
	return ok(cl), nil
}

// setClusterStatus suspends, push-blocks or resumes a cluster; one already
// in the state asked is answered unchanged.
func setClusterStatus(c *call) (answer, error) {
	var req struct {
		Status string `json:"status"`
	}
	if err := c.decode(&req); err != nil {
		return answer{}, err
	}
	cl, err := controlplane.GetCluster(c.ctx, c.tx, c.param("cluster"))
	if err != nil {
		return answer{}, err
	}
	c.tenantID, c.clusterID, c.target = cl.TenantID, cl.ID, cl.Slug
	if cl.Status == req.Status {
		return ok(cl), nil
	}
	if cl, err = controlplane.SetClusterStatus(c.ctx, c.tx, cl.ID, req.Status, false); err != nil {
		if controlplane.KindOf(err) == controlplane.Invalid {
			return answer{}, &fieldError{field: "status", err: err}
		}
		return answer{}, err
	}
	c.changed = append(c.changed, cl.ID)
	return ok(cl), nil
}

// setClusterOverrides replaces the cluster's limit overrides with the
// body (a JSON object of limit names; {} clears them) and answers the
// limits that now apply.
func setClusterOverrides(c *call) (answer, error) {
	var doc map[string]json.RawMessage
	if err := c.decode(&doc); err != nil {
		return answer{}, err
	}
	cl, err := controlplane.GetCluster(c.ctx, c.tx, c.param("cluster"))
	if err != nil {
		return answer{}, err
	}
	c.tenantID, c.clusterID, c.target = cl.TenantID, cl.ID, cl.Slug
	raw, err := json.Marshal(doc)
	if err != nil {
		return answer{}, err
	}
	l, err := controlplane.SetOverrides(c.ctx, c.tx, cl.ID, raw)
	if err != nil {
		if controlplane.KindOf(err) == controlplane.Invalid {
			return answer{}, &fieldError{field: "body", err: err}
		}
		return answer{}, err
	}
	c.changed = append(c.changed, cl.ID)
	return ok(l), nil
}

func getClusterLimits(c *call) (answer, error) {
	cl, err := controlplane.GetCluster(c.ctx, c.tx, c.param("cluster"))
	if err != nil {
		return answer{}, err
	}
	c.tenantID, c.clusterID, c.target = cl.TenantID, cl.ID, cl.Slug
	l, err := controlplane.ClusterLimits(c.ctx, c.tx, cl.ID)
	if err != nil {
		return answer{}, err
	}
	return ok(l), nil
}

// keyJSON is an API key as the API shows it: with its plaintext only in
// the answer that made it.
type keyJSON struct {
	controlplane.APIKey
	Key string `json:"key,omitempty"`
}

func listKeys(c *call) (answer, error) {
	all, err := c.query("all")
	if err != nil {
		return answer{}, err
	}
	if all != "" && all != "true" && all != "false" {
		return answer{}, apiRefusal{invalidField("all", "must be true or false")}
	}
	cl, err := controlplane.GetCluster(c.ctx, c.tx, c.param("cluster"))
	if err != nil {
		return answer{}, err
	}
	c.tenantID, c.clusterID, c.target = cl.TenantID, cl.ID, cl.Slug
	ks, err := controlplane.ListKeys(c.ctx, c.tx, cl.ID, all == "true")
	if err != nil {
		return answer{}, err
	}
	return ok(map[string]any{"keys": ks}), nil
}

type issueKeyRequest struct {
	Name      string   `json:"name"`
	Scopes    []string `json:"scopes"`
	ExpiresAt string   `json:"expires_at"`
	Env       string   `json:"env"`
	KeyHash   string   `json:"key_hash"`
}

// bodyHasKeyHash: a key issued under a caller's hash is ensured by that
// hash, so it needs no Idempotency-Key.
func bodyHasKeyHash(body []byte) bool {
	var req struct {
		KeyHash string `json:"key_hash"`
	}
	return json.Unmarshal(body, &req) == nil && strings.TrimSpace(req.KeyHash) != ""
}

// issueKey issues a key on the cluster. With key_hash the caller made the
// key and keeps it: only the hash is stored, and a repeat with the same
// hash answers the same key (409 if it differs). Without, the gateway
// makes the key and shows it once; the Idempotency-Key makes a retry
// answer that same key instead of a second one.
func issueKey(c *call) (answer, error) {
	var req issueKeyRequest
	if err := c.decode(&req); err != nil {
		return answer{}, err
	}
	name, err := controlplane.CheckKeyName(req.Name)
	if err != nil {
		return answer{}, &fieldError{"name", err}
	}
	scopes, err := controlplane.CheckScopes(req.Scopes)
	if err != nil {
		return answer{}, &fieldError{"scopes", err}
	}
	expires, err := controlplane.ParseExpiry(req.ExpiresAt, time.Now())
	if err != nil {
		return answer{}, &fieldError{"expires_at", err}
	}
	hash := ""
	if req.KeyHash != "" {
		if hash, err = controlplane.CheckKeyHash(req.KeyHash); err != nil {
			return answer{}, &fieldError{"key_hash", err}
		}
		if req.Env != "" {
			return answer{}, apiRefusal{invalidField("env", "only for a key the gateway makes, not with key_hash")}
		}
	} else if req.Env != "" {
		if _, _, err := controlplane.GenerateKey(req.Env); err != nil {
			return answer{}, &fieldError{"env", err}
		}
	}
	cl, err := controlplane.GetCluster(c.ctx, c.tx, c.param("cluster"))
	if err != nil {
		return answer{}, err
	}
	c.tenantID, c.clusterID = cl.TenantID, cl.ID
	if hash != "" {
		k, found, err := controlplane.KeyByHash(c.ctx, c.tx, hash)
		if err != nil {
			return answer{}, err
		}
		if found {
			var d differs
			d.check("cluster", k.ClusterSlug, cl.Slug)
			d.check("name", k.Name, name)
			d.check("scopes", strings.Join(k.Scopes, ","), strings.Join(scopes, ","))
			d.check("expires_at", optStamp(k.ExpiresAt), optStamp(expires))
			d.check("status", k.Status, "live")
			c.target = k.ID
			return ok(keyJSON{APIKey: k}), d.err("key with this hash", k.ID)
		}
	}
	k, err := controlplane.CreateKey(c.ctx, c.tx, controlplane.NewKey{
		Cluster: cl.ID, Name: name, Env: req.Env, Scopes: scopes, ExpiresAt: expires, Hash: hash,
	})
	if err != nil {
		return answer{}, err
	}
	c.target = k.ID
	c.changed = append(c.changed, cl.ID)
	return created(keyJSON{APIKey: k.APIKey, Key: k.Key}), nil
}

func optStamp(t *time.Time) string {
	if t == nil {
		return "never"
	}
	return stamp(*t)
}

func getKey(c *call) (answer, error) {
	k, err := pathKey(c)
	if err != nil {
		return answer{}, err
	}
	c.clusterID, c.target = k.ClusterID, k.ID
	return ok(keyJSON{APIKey: k}), nil
}

// revokeKey revokes a key; one already revoked is answered as it is.
func revokeKey(c *call) (answer, error) {
	k, err := pathKey(c)
	if err != nil {
		return answer{}, err
	}
	c.clusterID, c.target = k.ClusterID, k.ID
	if k.RevokedAt != nil {
		return ok(keyJSON{APIKey: k}), nil
	}
	if k, err = controlplane.RevokeKey(c.ctx, c.tx, k.ID); err != nil {
		return answer{}, err
	}
	c.changed = append(c.changed, k.ClusterID)
	return ok(keyJSON{APIKey: k}), nil
}

// rotateKey issues a key that replaces the one named, which stays valid
// for the overlap (default a day; "0" revokes it at once).
func rotateKey(c *call) (answer, error) {
	var req struct {
		Overlap   string `json:"overlap"`
		ExpiresAt string `json:"expires_at"`
		Env       string `json:"env"`
	}
	if err := c.decode(&req); err != nil {
		return answer{}, err
	}
	overlap := controlplane.DefaultRotationOverlap
	if req.Overlap != "" {
		var err error
		if overlap, err = controlplane.ParseOverlap(req.Overlap); err != nil {
			return answer{}, &fieldError{"overlap", err}
		}
	}
	expires, err := controlplane.ParseExpiry(req.ExpiresAt, time.Now())
	if err != nil {
		return answer{}, &fieldError{"expires_at", err}
	}
	if req.Env != "" {
		if _, _, err := controlplane.GenerateKey(req.Env); err != nil {
			return answer{}, &fieldError{"env", err}
		}
	}
	old, err := pathKey(c)
	if err != nil {
		return answer{}, err
	}
	c.clusterID, c.target = old.ClusterID, old.ID
	r, err := controlplane.RotateKey(c.ctx, c.tx, old.ID, overlap, req.Env, expires)
	if err != nil {
		return answer{}, err
	}
	c.changed = append(c.changed, old.ClusterID)
	return ok(map[string]any{
		"new": keyJSON{APIKey: r.New.APIKey, Key: r.New.Key}, "old": keyJSON{APIKey: r.Old}, "old_valid_until": r.OldValidUntil,
	}), nil
}

// ensureUser creates the user named by the path in the body's tenant, or
// answers the one that exists when the request matches it.
func ensureUser(c *call) (answer, error) {
	var req struct {
		Tenant string `json:"tenant"`
		Name   string `json:"name"`
	}
	if err := c.decode(&req); err != nil {
		return answer{}, err
	}
	email, err := controlplane.CheckEmail(c.param("email"))
	if err != nil {
		return answer{}, &fieldError{"email", err}
	}
	tenant, err := controlplane.CheckSlug("tenant", req.Tenant)
	if err != nil {
		return answer{}, &fieldError{"tenant", err}
	}
	name, err := controlplane.CheckUserName(req.Name)
	if err != nil {
		return answer{}, &fieldError{"name", err}
	}
	u, err := controlplane.GetUser(c.ctx, c.tx, email)
	switch {
	case err == nil:
		var d differs
		d.check("tenant", u.TenantSlug, tenant)
		have := ""
		if u.Name != nil {
			have = *u.Name
		}
		d.check("name", have, name)
		c.tenantID, c.target = u.TenantID, u.ID
		return ok(u), d.err("user", email)
	case controlplane.KindOf(err) != controlplane.NotFound:
		return answer{}, err
	}
	if u, err = controlplane.CreateUser(c.ctx, c.tx, controlplane.NewUser{Tenant: tenant, Email: email, Name: name}); err != nil {
		return answer{}, err
	}
	c.tenantID, c.target = u.TenantID, u.ID
	return created(u), nil
}

func getUser(c *call) (answer, error) {
	u, err := controlplane.GetUser(c.ctx, c.tx, c.param("email"))
	if err != nil {
		return answer{}, err
	}
	c.tenantID, c.target = u.TenantID, u.ID
	return ok(u), nil
}

// grantRole gives the user the role on the cluster, replacing any other;
// the same role again changes nothing.
func grantRole(c *call) (answer, error) {
	var req struct {
		Role string `json:"role"`
	}
	if err := c.decode(&req); err != nil {
		return answer{}, err
	}
	role, err := controlplane.CheckRole(req.Role)
	if err != nil {
		return answer{}, &fieldError{"role", err}
	}
	email, err := controlplane.CheckEmail(c.param("email"))
	if err != nil {
		return answer{}, &fieldError{"email", err}
	}
	cl, err := controlplane.GetCluster(c.ctx, c.tx, c.param("cluster"))
	if err != nil {
		return answer{}, err
	}
	c.tenantID, c.clusterID, c.target = cl.TenantID, cl.ID, email
	current, err := currentRole(c, cl.ID, email)
	if err != nil {
		return answer{}, err
	}
	if current == role {
		return ok(controlplane.Grant{Email: email, Cluster: cl.Slug, Role: role, Previous: role}), nil
	}
	g, err := controlplane.GrantRole(c.ctx, c.tx, email, cl.ID, role)
	if err != nil {
		return answer{}, err
	}
	g.Cluster = cl.Slug
	c.changed = append(c.changed, cl.ID)
	return ok(g), nil
}

// revokeRole takes the user's role on the cluster away; a user without
// one is answered with no role and nothing changed.
func revokeRole(c *call) (answer, error) {
	email, err := controlplane.CheckEmail(c.param("email"))
	if err != nil {
		return answer{}, &fieldError{"email", err}
	}
	cl, err := controlplane.GetCluster(c.ctx, c.tx, c.param("cluster"))
	if err != nil {
		return answer{}, err
	}
	c.tenantID, c.clusterID, c.target = cl.TenantID, cl.ID, email
	if _, err := controlplane.GetUser(c.ctx, c.tx, email); err != nil {
		return answer{}, err
	}
	current, err := currentRole(c, cl.ID, email)
	if err != nil {
		return answer{}, err
	}
	if current == "" {
		return ok(controlplane.Grant{Email: email, Cluster: cl.Slug}), nil
	}
	g, err := controlplane.RevokeRole(c.ctx, c.tx, email, cl.ID)
	if err != nil {
		return answer{}, err
	}
	g.Cluster = cl.Slug
	c.changed = append(c.changed, cl.ID)
	return ok(g), nil
}

func currentRole(c *call, clusterID, email string) (string, error) {
	var role string
	err := c.tx.QueryRow(c.ctx, `SELECT cr.role FROM queen_proxy.cluster_roles cr JOIN queen_proxy.users u ON u.id = cr.user_id
		WHERE cr.cluster_id = $1::uuid AND u.email = $2`, clusterID, email).Scan(&role)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	return role, err
}

// Usage paging: at most maxPageSize clusters per page.
const (
	defaultPageSize = 100
	maxPageSize     = 1000
)

// getUsage answers what `caddy queen usage` shows (the same query) for
// the period and clusters asked, a page of clusters at a time, each with
// its usage per op class beside.
func getUsage(c *call) (answer, error) {
	q := map[string]string{}
	for _, name := range []string{"from", "to", "month", "tenant", "cluster", "page_size", "page_token"} {
		v, err := c.query(name)
		if err != nil {
			return answer{}, err
		}
		q[name] = v
	}
	for name := range c.r.URL.Query() {
		if _, known := q[name]; !known {
			return answer{}, apiRefusal{invalidField(name, "unknown query parameter")}
		}
	}
	from, to, err := controlplane.ParsePeriod(q["from"], q["to"], q["month"], time.Now())
	if err != nil {
		return answer{}, &fieldError{"from/to/month", err}
	}
	size := defaultPageSize
	if s := q["page_size"]; s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > maxPageSize {
			return answer{}, apiRefusal{invalidField("page_size", fmt.Sprintf("must be 1 to %d", maxPageSize))}
		}
		size = n
	}
	offset := 0
	if s := q["page_token"]; s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			return answer{}, apiRefusal{invalidField("page_token", "must be a next_page_token of an earlier answer")}
		}
		offset = n
	}
	rep, err := controlplane.Usage(c.ctx, c.tx, controlplane.UsageQuery{From: from, To: to, Tenant: q["tenant"], Cluster: q["cluster"]})
	if err != nil {
		return answer{}, err
	}
	rows := rep.Clusters
	if offset > len(rows) {
		offset = len(rows)
	}
	end := min(offset+size, len(rows))
	page := rows[offset:end]
	byClass, err := controlplane.UsageByOpClass(c.ctx, c.tx, from, to, slugs(page))
	if err != nil {
		return answer{}, err
	}
	type row struct {
		controlplane.UsageRow
		OpClasses map[string]controlplane.OpClassUsage `json:"op_classes"`
	}
	out := make([]row, 0, len(page))
	for _, u := range page {
		oc := byClass[u.Cluster]
		if oc == nil {
			oc = map[string]controlplane.OpClassUsage{}
		}
		out = append(out, row{UsageRow: u, OpClasses: oc})
	}
	var next *string
	if end < len(rows) {
		s := strconv.Itoa(end)
		next = &s
	}
	c.target = "usage"
	return ok(map[string]any{"from": stamp(rep.From), "to": stamp(rep.To), "clusters": out, "next_page_token": next,
		"tenants": tenantTotals(rows)}), nil
}

// tenantUsage is one tenant's usage: the sum of its clusters' rows.
type tenantUsage struct {
	Tenant           string `json:"tenant"`
	Clusters         int    `json:"clusters"`
	Requests         int64  `json:"requests"`
	BillableMessages int64  `json:"billable_messages"`
	Messages         int64  `json:"messages"`
	Delivered        int64  `json:"delivered"`
	BytesIn          int64  `json:"bytes_in"`
	BytesOut         int64  `json:"bytes_out"`
}

// tenantTotals sums every selected cluster's row (not only the page's)
// per tenant, in the report's order.
func tenantTotals(rows []controlplane.UsageRow) []tenantUsage {
	out := []tenantUsage{}
	for _, r := range rows {
		if len(out) == 0 || out[len(out)-1].Tenant != r.Tenant {
			out = append(out, tenantUsage{Tenant: r.Tenant})
		}
		t := &out[len(out)-1]
		t.Clusters++
		t.Requests += r.Requests
		t.BillableMessages += r.BillableMessages
		t.Messages += r.Messages
		t.Delivered += r.Delivered
		t.BytesIn += r.BytesIn
		t.BytesOut += r.BytesOut
	}
	return out
}

func slugs(rows []controlplane.UsageRow) []string {
	out := make([]string, 0, len(rows))
	for _, r := range rows {
		out = append(out, r.Cluster)
	}
	return slices.Clip(out)
}

// getActivity answers when the cluster last had traffic and when each of
// its keys was last used.
func getActivity(c *call) (answer, error) {
	cl, err := controlplane.GetCluster(c.ctx, c.tx, c.param("cluster"))
	if err != nil {
		return answer{}, err
	}
	c.tenantID, c.clusterID, c.target = cl.TenantID, cl.ID, cl.Slug
	act, err := controlplane.ClusterActivity(c.ctx, c.tx, cl.ID)
	if err != nil {
		return answer{}, err
	}
	return ok(act), nil
}

// tenantClusters lists the ids of a tenant's clusters, whose cached state
// a change of the tenant's status makes stale.
func tenantClusters(c *call, tenantID string) []string {
	var ids []string
	_ = c.tx.QueryRow(c.ctx, `SELECT coalesce(array_agg(id::text), '{}') FROM queen_proxy.clusters WHERE tenant_id = $1::uuid`,
		tenantID).Scan(&ids)
	return ids
}

// finishTenantDeletion is step 3 of a tenant's deletion, once its
// clusters' data is purged from their cells (step 2, the caller's): the
// tenant and everything it owns leave the control plane, after every
// gateway confirmed it forwards nothing more of its clusters. A tenant not
// deleting (step 1) is refused with 409. A repeat after it succeeded is
// 404: the tenant is gone.
func finishTenantDeletion(c *call) (answer, error) {
	if err := c.decode(&struct{}{}); err != nil {
		return answer{}, err
	}
	pool := c.a.o.Pool
	t, err := controlplane.GetTenant(c.ctx, pool, c.param("tenant"))
	if err != nil {
		return answer{}, err
	}
	c.target = t.Slug
	ids, err := clusterIDs(c, t.ID)
	if err != nil {
		return answer{}, err
	}
	d, err := controlplane.DeleteTenant(c.ctx, pool, t.ID, false, nil)
	if err != nil {
		return answer{}, err
	}
	c.changed = append(c.changed, ids...)
	return ok(d), nil
}

func clusterIDs(c *call, tenantID string) ([]string, error) {
	var ids []string
	err := c.a.o.Pool.QueryRow(c.ctx, `SELECT coalesce(array_agg(id::text), '{}') FROM queen_proxy.clusters WHERE tenant_id = $1::uuid`,
		tenantID).Scan(&ids)
	return ids, err
}

// moveCluster sends the cluster's traffic to another active cell from its
// next request; a cluster already there is answered unchanged. A cell's
// keeper (on a cell not known to scope by tenant) leaves only once its
// queues are gone from the broker, which the CLI's move --delete-queues
// does: the API refuses such a move with 409.
func moveCluster(c *call) (answer, error) {
	var req struct {
		Cell string `json:"cell"`
	}
	if err := c.decode(&req); err != nil {
		return answer{}, err
	}
	if strings.TrimSpace(req.Cell) == "" {
		return answer{}, &fieldError{"cell", errors.New("the cell to move to is required")}
	}
	pool := c.a.o.Pool
	cl, err := controlplane.GetCluster(c.ctx, pool, c.param("cluster"))
	if err != nil {
		return answer{}, err
	}
	c.target = cl.Slug
	m, err := controlplane.MoveCluster(c.ctx, pool, cl.ID, req.Cell, nil)
	if err != nil {
		return answer{}, err
	}
	c.changed = append(c.changed, cl.ID)
	return ok(m), nil
}

// pathKey reads the key the path names; a malformed id is a 400 naming
// the key.
func pathKey(c *call) (controlplane.APIKey, error) {
	k, err := controlplane.GetKey(c.ctx, c.tx, c.param("key"))
	if controlplane.KindOf(err) == controlplane.Invalid {
		return k, &fieldError{"key", err}
	}
	return k, err
}

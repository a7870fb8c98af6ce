package tenancy

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// TenantScoping is what a cell's broker does with x-queen-tenant, as the
// gateway found out by probing it.
type TenantScoping string

const (
	// ScopingUnknown: not probed since the gateway started or since the
	// cell was last unreachable, or the last probe could not decide.
	ScopingUnknown TenantScoping = "unknown"
	// ScopingScoped: the broker keeps one namespace per x-queen-tenant.
	ScopingScoped TenantScoping = "scoped"
	// ScopingUnscoped: the broker ignores x-queen-tenant, so all clusters
	// on the cell would share one namespace (the public 0.15.1 broker).
	ScopingUnscoped TenantScoping = "unscoped"
)

// ProbeQueuePrefix starts the name of the queue a scoping probe creates and
// removes.
const ProbeQueuePrefix = "queengate-isolation-probe-"

// ProbeCell is what a scoping probe needs to reach a cell.
type ProbeCell struct {
	ID      string
	Slug    string
	BaseURL string
	// Secret is the cell's static secret (cells.cell_secret), empty for
	// none; the prober derives the credential it presents from it.
	Secret string
	// Tenancy is the operator's statement (cells.tenancy_stated): "probe",
	// "scoped" or "unscoped".
	Tenancy string
}

// ProbeCellOf is the cell of a cluster.
func ProbeCellOf(c *Cluster) ProbeCell {
	return ProbeCell{ID: c.CellID, Slug: c.CellSlug, BaseURL: c.CellURL, Secret: c.CellSecret, Tenancy: c.CellTenancy}
}

// probeTimeout bounds a whole probe when the context has no deadline.
const probeTimeout = 15 * time.Second

// probeRequests is how many requests one probe sends to the cell.
const probeRequests = 4

// ProbeTenantScoping finds out whether the cell's broker scopes by
// x-queen-tenant. Under a random tenant id no cluster has, it configures
// an empty queue with a random name, then asks for that queue under the
// same tenant (it must be there) and under a second random tenant (a
// scoping broker does not have it there), and removes it again. No message
// is written, so no consumer on the cell can receive anything; the probe
// goes to the cell directly and is never metered.
//
// An answer that decides nothing (an error body, a queue the first tenant
// cannot see) returns ScopingUnknown with an error saying why.
//
// authorization is the complete Authorization header for the cell (a
// credential that may configure and delete queues); empty sends none.
func ProbeTenantScoping(ctx context.Context, client *http.Client, cell ProbeCell, authorization string) (TenantScoping, error) {
	if client == nil {
		client = http.DefaultClient
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, probeTimeout)
		defer cancel()
	}
	p := &cellProbe{client: client, baseURL: cell.BaseURL, authorization: authorization,
		writer: randomUUID(), reader: randomUUID()}
	var suffix [16]byte
	_, _ = rand.Read(suffix[:]) // crypto/rand.Read never fails
	p.queue = ProbeQueuePrefix + hex.EncodeToString(suffix[:])

	verdict, err := p.run(ctx)
	// Remove the queue whatever the outcome; on a broker that does not
	// scope, removing it under the writer removes it for every tenant.
	if cerr := p.removeQueue(context.WithoutCancel(ctx)); cerr != nil {
		err = errors.Join(err, cerr)
	}
	return verdict, err
}

// randomUUID returns a random (version 4) UUID in text form.
func randomUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

type cellProbe struct {
	client         *http.Client
	baseURL        string
	authorization  string
	writer, reader string // two random broker tenant ids
	queue          string
}

func (p *cellProbe) run(ctx context.Context) (TenantScoping, error) {
	var configured struct {
		Configured bool   `json:"configured"`
		Error      string `json:"error"`
	}
	body := fmt.Sprintf(`{"queue":%q,"options":{"leaseTime":30}}`, p.queue)
	if err := p.call(ctx, http.MethodPost, "/api/v1/configure", p.writer, body, &configured); err != nil {
		return ScopingUnknown, fmt.Errorf("configure the probe queue: %w", err)
	}
	if !configured.Configured {
		return ScopingUnknown, fmt.Errorf("configure the probe queue: the broker answered %q", configured.Error)
	}
	seen, err := p.queueVisible(ctx, p.writer)
	if err != nil {
		return ScopingUnknown, err
	}
	if !seen {
		return ScopingUnknown, errors.New("the probe queue is not visible even to the tenant that configured it")
	}
	seen, err = p.queueVisible(ctx, p.reader)
	if err != nil {
		return ScopingUnknown, err
	}
	if seen {
		return ScopingUnscoped, nil
	}
	return ScopingScoped, nil
}

// queueVisible asks for the probe queue under tenant. The broker answers
// an unknown queue with HTTP 200 {"error":"Queue not found"}.
func (p *cellProbe) queueVisible(ctx context.Context, tenant string) (bool, error) {
	var detail struct {
		Name  string `json:"name"`
		Error string `json:"error"`
	}
	if err := p.call(ctx, http.MethodGet, "/api/v1/resources/queues/"+p.queue, tenant, "", &detail); err != nil {
		return false, fmt.Errorf("read the probe queue: %w", err)
	}
	switch {
	case detail.Name == p.queue:
		return true, nil
	case strings.EqualFold(detail.Error, "Queue not found"):
		return false, nil
	}
	return false, fmt.Errorf("read the probe queue: unexpected answer (name %q, error %q)", detail.Name, detail.Error)
}

func (p *cellProbe) removeQueue(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	var deleted struct {
		Deleted bool `json:"deleted"`
	}
	if err := p.call(ctx, http.MethodDelete, "/api/v1/resources/queues/"+p.queue, p.writer, "", &deleted); err != nil {
		return fmt.Errorf("remove the probe queue %s: %w", p.queue, err)
	}
	if !deleted.Deleted {
		return fmt.Errorf("remove the probe queue %s: the broker did not delete it", p.queue)
	}
	return nil
}

// probeMaxAnswer caps what the probe reads of one answer.
const probeMaxAnswer = 1 << 20

func (p *cellProbe) call(ctx context.Context, method, path, tenant, body string, out any) error {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(p.baseURL, "/")+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("x-queen-tenant", tenant)
	req.Header.Set("Accept", "application/json")
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if p.authorization != "" {
		req.Header.Set("Authorization", p.authorization)
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, probeMaxAnswer))
	if err != nil {
		return fmt.Errorf("read the answer: %w", err)
	}
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("HTTP %d: %s", resp.StatusCode, bytes.TrimSpace(raw[:min(len(raw), 200)]))
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("answer is not the JSON expected: %w", err)
	}
	return nil
}

package tenancy

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// CellCall is how the gateway's own tools (the scoping probe, grants at
// placement) reach a cell's broker directly, outside any client's request:
// the one place that sets the broker tenant and the cell credential on
// such a request.
type CellCall struct {
	Client  *http.Client // nil: http.DefaultClient
	BaseURL string       // the cell's broker URL (cells.base_url)
	// Authorization is the complete Authorization header for the cell;
	// empty sends none.
	Authorization string
}

// cellCallMaxAnswer caps what is read of one answer.
const cellCallMaxAnswer = 1 << 20

// BearerAuthorization is the Authorization header for a cell secret
// (cells.cell_secret), empty for none.
func BearerAuthorization(secret string) string {
	if secret == "" {
		return ""
	}
	return "Bearer " + secret
}

// Do sends one request to the cell as the broker tenant (x-queen-tenant),
// with body as JSON when it is not empty, and returns the status and the
// answer (at most 1 MiB of it). Only a failure to exchange the request is
// an error; any status is the caller's to judge.
func (c CellCall) Do(ctx context.Context, method, path, tenant string, body []byte) (int, []byte, error) {
	client := c.Client
	if client == nil {
		client = http.DefaultClient
	}
	var rd io.Reader
	if len(body) > 0 {
		rd = strings.NewReader(string(body))
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(c.BaseURL, "/")+path, rd)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("x-queen-tenant", tenant)
	req.Header.Set("Accept", "application/json")
	if len(body) > 0 {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.Authorization != "" {
		req.Header.Set("Authorization", c.Authorization)
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, cellCallMaxAnswer))
	if err != nil {
		return resp.StatusCode, raw, fmt.Errorf("read the answer: %w", err)
	}
	return resp.StatusCode, raw, nil
}

package console

import (
	"net"
	"net/http"
	"strings"

	"github.com/queengate/queengate/tenancy"
)

// SharedHostLister is a ClusterResolver that can list its shared hosts,
// so that the Connect page offers them as addresses an SDK can use where
// the cluster's own name does not resolve.
type SharedHostLister interface {
	SharedHosts() []string
}

// Snippet is one ready-to-paste client example of the Connect page.
type Snippet struct {
	Lang  string `json:"lang"`
	Label string `json:"label"`
	Code  string `json:"code"`
}

// APIKeyEnv is the environment variable every snippet reads the API key
// from, so that a pasted snippet never holds a secret.
const APIKeyEnv = "QUEEN_API_KEY"

// ConnectSnippets are the client examples for a cluster reached at base
// (scheme://host[:port], no trailing slash): the Queen SDKs take the
// address as their URL and the API key as their bearer token. Each one
// pushes, pops a batch and acknowledges the whole batch in one request,
// which is what keeps a consumer within the request rate (docs/connect.md).
func ConnectSnippets(base string) []Snippet {
	base = strings.TrimRight(base, "/")
	js := `import { Queen } from 'queen-mq'

const queen = new Queen({
  url: '` + base + `',
  bearerToken: process.env.` + APIKeyEnv + `,
})

await queen.queue('orders').push([{ data: { orderId: 1 } }])

// Up to 100 messages per pop, acknowledged together in one request.
const messages = await queen.queue('orders').batch(100).pop()
await queen.ack(messages, true)
`
	py := `import asyncio
import os

from queen import Queen


async def main():
    queen = Queen(url="` + base + `", bearer_token=os.environ["` + APIKeyEnv + `"])
    await queen.queue("orders").push([{"data": {"orderId": 1}}])
    # Up to 100 messages per pop, acknowledged together in one request.
    messages = await queen.queue("orders").batch(100).pop()
    await queen.ack(messages, True)
    await queen.close()


asyncio.run(main())
`
	goCode := `package main

import (
	"context"
	"log"
	"os"

	queen "github.com/smartpricing/queen/client-go"
)

func main() {
	ctx := context.Background()
	client, err := queen.New(queen.ClientConfig{
		URLs:        []string{"` + base + `"},
		BearerToken: os.Getenv("` + APIKeyEnv + `"),
	})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close(ctx)
	if _, err := client.Queue("orders").Push(map[string]any{"orderId": 1}).Execute(ctx); err != nil {
		log.Fatal(err)
	}
	// Up to 100 messages per pop, acknowledged together in one request.
	messages, err := client.Queue("orders").Batch(100).Pop(ctx)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := client.Ack(ctx, messages, true, queen.AckOptions{}); err != nil {
		log.Fatal(err)
	}
}
`
	curl := `curl -sS -H "Authorization: Bearer $` + APIKeyEnv + `" -H 'Content-Type: application/json' \
  -d '{"items":[{"queue":"orders","payload":{"orderId":1}}]}' ` + base + `/api/v1/push
curl -sS -H "Authorization: Bearer $` + APIKeyEnv + `" '` + base + `/api/v1/pop/queue/orders?batch=100&wait=false'
`
	return []Snippet{
		{Lang: "js", Label: "JavaScript (queen-mq)", Code: js},
		{Lang: "python", Label: "Python (queen-mq)", Code: py},
		{Lang: "go", Label: "Go (client-go)", Code: goCode},
		{Lang: "sh", Label: "curl", Code: curl},
	}
}

// connectAddresses are where a client reaches the caller's cluster: its
// own address (the Host the console was reached on when that names the
// cluster) and each shared host (the API key names the cluster there).
// sdk is the one the snippets use: the cluster's own address, unless it is
// a *.localhost name, which browsers resolve but Node, Python and Go on
// glibc do not, and a shared host exists.
func (s *Surface) connectAddresses(r *http.Request) (sdk, own string, shared []string) {
	scheme := "http"
	if s.o.IsHTTPS(r) {
		scheme = "https"
	}
	host := tenancy.CanonicalHost(r.Host)
	_, port, _ := net.SplitHostPort(r.Host)
	withPort := func(h string) string {
		if port == "" {
			return scheme + "://" + h
		}
		return scheme + "://" + net.JoinHostPort(h, port)
	}
	if !s.o.Clusters.SharedHost(host) {
		own = withPort(host)
	}
	if l, ok := s.o.Clusters.(SharedHostLister); ok {
		for _, h := range l.SharedHosts() {
			shared = append(shared, withPort(h))
		}
	}
	sdk = own
	localName := host == "localhost" || strings.HasSuffix(host, ".localhost")
	if (own == "" || localName) && len(shared) > 0 {
		sdk = shared[0]
	}
	return sdk, own, shared
}

// connect is the Connect page's data: the address and key an SDK takes,
// the limits a client meets, and ready-to-paste snippets.
func (s *Surface) connect(w http.ResponseWriter, r *http.Request, c *caller) {
	sdk, own, shared := s.connectAddresses(r)
	l := c.cluster.Limits
	if shared == nil {
		shared = []string{}
	}
	var ownURL *string
	if own != "" {
		ownURL = &own
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"slug":        c.cluster.Slug,
		"url":         sdk,
		"cluster_url": ownURL,
		"shared_urls": shared,
		"api_key_env": APIKeyEnv,
		"limits": map[string]*int64{
			"max_req_per_sec": capJSON(l.MaxReqPerSec), "req_burst": capJSON(l.ReqBurst),
			"max_msgs_per_sec": capJSON(l.MaxMsgsPerSec), "msgs_burst": capJSON(l.MsgsBurst),
			"max_batch_items": capJSON(l.MaxBatchItems), "max_payload_bytes": capJSON(l.MaxPayloadBytes),
			"max_parked_pops": capJSON(l.MaxParkedPops),
		},
		"snippets": ConnectSnippets(sdk),
	})
}

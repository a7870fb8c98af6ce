package main

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// batchFront is the upstream of the batch modes: it answers the batch
// workloads' pushes and pops itself, in the fake broker's words, and hands
// everything else (the gateway's isolation probes, inventories, the load
// mode's requests) to the fake broker behind it. The fake broker decodes
// every push into generic maps and keeps every message: a push of 1,000
// items costs it tens of milliseconds, which would hide both proxies
// behind it. The front answers in microseconds and never runs out of
// messages to pop, so the figures are the proxies'. It runs in the
// benchmark's process: its CPU is the load generator's.
type batchFront struct {
	next *httputil.ReverseProxy
	seq  atomic.Uint64
	// pushAnswers holds one answer per (queue, items), built once.
	pushAnswers sync.Map
	bufs        sync.Pool // *bytes.Buffer: push bodies
	answers     sync.Pool // *[]byte: pop answers
	started     string    // createdAt of every popped message
}

// batchQueuePrefix starts the name of every queue the batch workloads use.
const batchQueuePrefix = "batch-"

func startBatchFront(upstream string) (*http.Server, string, error) {
	target, err := url.Parse("http://" + upstream)
	if err != nil {
		return nil, "", err
	}
	f := &batchFront{
		next: &httputil.ReverseProxy{
			Rewrite: func(pr *httputil.ProxyRequest) {
				pr.SetURL(target)
				pr.Out.Host = upstream
			},
			Transport: &http.Transport{MaxIdleConnsPerHost: 64, IdleConnTimeout: time.Minute},
		},
		started: time.Now().UTC().Format("2006-01-02T15:04:05.000000Z"),
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, "", err
	}
	srv := &http.Server{Handler: f, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(l) }()
	return srv, l.Addr().String(), nil
}

func (f *batchFront) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/api/v1/pop/queue/"+batchQueuePrefix) {
		f.pop(w, r)
		return
	}
	if r.Method == http.MethodPost && r.URL.Path == "/api/v1/push" {
		buf, _ := f.bufs.Get().(*bytes.Buffer)
		if buf == nil {
			buf = new(bytes.Buffer)
		}
		defer f.bufs.Put(buf)
		buf.Reset()
		if _, err := buf.ReadFrom(r.Body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body := buf.Bytes()
		if queue, ok := batchPushQueue(body); ok {
			f.push(w, queue, bytes.Count(body, []byte(`{"queue":`)))
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
	}
	f.next.ServeHTTP(w, r)
}

// batchPushQueue is the queue of a batch workload's push (every item goes
// to the first item's queue).
func batchPushQueue(body []byte) (string, bool) {
	const lead = `{"items":[{"queue":"` + batchQueuePrefix
	if !bytes.HasPrefix(body, []byte(lead)) {
		return "", false
	}
	rest := body[len(lead)-len(batchQueuePrefix):]
	end := bytes.IndexByte(rest, '"')
	if end < 0 {
		return "", false
	}
	return string(rest[:end]), true
}

type pushAnswerKey struct {
	queue string
	items int
}

// push answers every item queued, as the broker does.
func (f *batchFront) push(w http.ResponseWriter, queue string, items int) {
	key := pushAnswerKey{queue, items}
	answer, ok := f.pushAnswers.Load(key)
	if !ok {
		var b bytes.Buffer
		b.WriteByte('[')
		for i := range items {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `{"index":%d,"message_id":"%s","partition_id":"%s","queueName":%q,"status":"queued","trace_id":null,"transaction_id":"%s"}`,
				i, fakeUUID(uint64(i), 7), fakeUUID(1, 4), queue, fakeUUID(uint64(i), 4))
		}
		b.WriteByte(']')
		answer, _ = f.pushAnswers.LoadOrStore(key, b.Bytes())
	}
	body := answer.([]byte)
	h := w.Header()
	h["Content-Type"] = []string{"application/json"}
	h["Content-Length"] = []string{strconv.Itoa(len(body))}
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(body)
}

// pop answers a full batch of messages never delivered before: fresh ids
// for each, so the gateway's redelivery filter does its full work.
func (f *batchFront) pop(w http.ResponseWriter, r *http.Request) {
	queue := strings.TrimPrefix(r.URL.Path, "/api/v1/pop/queue/")
	batch, err := strconv.Atoi(r.URL.Query().Get("batch"))
	if err != nil || batch < 1 {
		batch = 1
	}
	kept, _ := f.answers.Get().(*[]byte)
	if kept == nil {
		kept = new([]byte)
	}
	defer f.answers.Put(kept)
	partition := fakeUUID(uint64(len(queue)), 4)
	first := f.seq.Add(uint64(batch)) - uint64(batch)
	filler := strings.Repeat("x", 64)
	b := (*kept)[:0]
	b = append(b, `{"consumerGroup":"__QUEUE_MODE__","leaseId":null,"messages":[`...)
	for i := range uint64(batch) {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"consumerGroup":"__QUEUE_MODE__","createdAt":"`...)
		b = append(b, f.started...)
		b = append(b, `","data":{"seq":`...)
		b = strconv.AppendUint(b, first+i, 10)
		b = append(b, `,"data":"`...)
		b = append(b, filler...)
		b = append(b, `"},"id":"`...)
		b = append(b, fakeUUID(first+i, 7)...)
		b = append(b, `","leaseId":null,"partition":"Default","partitionId":"`...)
		b = append(b, partition...)
		b = append(b, `","producerSub":null,"traceId":null,"transactionId":"`...)
		b = append(b, fakeUUID(first+i, 4)...)
		b = append(b, `"}`...)
	}
	b = append(b, `],"partition":"Default","partitionId":"`...)
	b = append(b, partition...)
	b = append(b, `","partitionsClaimed":1,"queue":`...)
	b = strconv.AppendQuote(b, queue)
	b = append(b, `,"success":true}`...)
	h := w.Header()
	h["Content-Type"] = []string{"application/json"}
	h["Content-Length"] = []string{strconv.Itoa(len(b))}
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b)
	*kept = b
}

// fakeUUID spells n as a UUID of the given version.
func fakeUUID(n uint64, version int) string {
	return fmt.Sprintf("019a0000-0000-%d000-8000-%012x", version, n&0xffffffffffff)
}

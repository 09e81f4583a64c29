package framework

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"slices"
	"sync"
	"time"
)

// proxyDialTimeout bounds one dial of a backend. Loopback dials of a stopped replica fail at once
// (connection refused); the timeout only matters for a backend that is wedged.
const proxyDialTimeout = 2 * time.Second

// rrProxy is a round-robin TCP proxy on loopback standing in for a Service in front of several
// certapi replicas: kube-apiserver reaches it through the ExternalName Service. Each accepted
// connection goes to the next backend in round-robin order; a backend that cannot be dialled (a
// stopped replica) is skipped, as its endpoint would be, and so is a backend taken out of rotation
// (SetRouted), as a terminating pod's endpoint is. Bytes are copied both ways; when either side ends,
// both connections are closed. Spreading is per connection: kube-apiserver pools its connections to
// the Service, so its requests go to whichever replica a pooled connection was made to.
type rrProxy struct {
	ln       net.Listener
	backends []string // host:port
	names    []string // for the log, same order as backends
	ctx      context.Context
	cancel   context.CancelFunc

	logMu sync.Mutex
	log   io.Writer

	mu     sync.Mutex
	nextID uint64
	next   int    // backend to try first for the next connection
	routes []int  // backend index of every connection routed so far, in order
	open   []int  // open connections per backend
	out    []bool // backends taken out of rotation: no new connections go to them
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

// newRRProxy listens on addr (e.g. 127.0.0.1:0) and serves until Close. names label the backends
// in the log, which may be nil.
func newRRProxy(addr string, backends, names []string, log io.Writer) (*rrProxy, error) {
	if len(backends) == 0 {
		return nil, errors.New("round-robin proxy: no backends")
	}
	if len(names) != len(backends) {
		names = slices.Clone(backends)
	}
	if log == nil {
		log = io.Discard
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("round-robin proxy: listening on %s: %w", addr, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &rrProxy{
		ln:       ln,
		backends: slices.Clone(backends),
		names:    names,
		ctx:      ctx,
		cancel:   cancel,
		log:      log,
		open:     make([]int, len(backends)),
		out:      make([]bool, len(backends)),
		conns:    map[net.Conn]struct{}{},
	}
	p.logf("listening on %s; backends %v", ln.Addr(), backends)
	p.wg.Add(1)
	go p.serve()
	return p, nil
}

// Port is the port the proxy listens on.
func (p *rrProxy) Port() int { return p.ln.Addr().(*net.TCPAddr).Port }

// Routes returns the backend index of every connection routed so far, in the order the dials
// succeeded (which, for connections accepted at the same moment, need not be accept order).
func (p *rrProxy) Routes() []int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.routes)
}

// Open returns the number of open connections per backend.
func (p *rrProxy) Open() []int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.open)
}

// SetRouted puts backend i in or out of rotation. Connections open to a backend taken out stay open,
// as connections to a terminating pod do once its endpoint is removed.
func (p *rrProxy) SetRouted(i int, routed bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if i >= 0 && i < len(p.out) {
		p.out[i] = !routed
	}
}

func (p *rrProxy) routed(i int) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return !p.out[i]
}

// Close stops listening, closes every open connection and waits for the proxy's goroutines to
// end. It is idempotent.
func (p *rrProxy) Close() {
	p.mu.Lock()
	first := !p.closed
	p.closed = true
	conns := slices.Collect(maps.Keys(p.conns))
	p.mu.Unlock()
	if first {
		p.cancel()
		p.ln.Close()
		for _, c := range conns {
			c.Close()
		}
	}
	p.wg.Wait()
	if first {
		p.logf("closed")
	}
}

func (p *rrProxy) serve() {
	defer p.wg.Done()
	var backoff time.Duration
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if p.isClosed() || errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of descriptors or similar: back off as net/http does, and keep serving.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			p.logf("accept: %v; retrying in %s", err, backoff)
			select {
			case <-time.After(backoff):
			case <-p.ctx.Done():
				return
			}
			continue
		}
		backoff = 0
		// The backend to try first is chosen here, in accept order; the dial runs in handle.
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			c.Close()
			return
		}
		p.conns[c] = struct{}{}
		p.nextID++
		id, start := p.nextID, p.next
		p.next = (start + 1) % len(p.backends)
		p.mu.Unlock()
		p.wg.Add(1)
		go p.handle(c, id, start)
	}
}

func (p *rrProxy) isClosed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.closed
}

// track registers c for Close; it returns false when the proxy is closed.
func (p *rrProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *rrProxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

func (p *rrProxy) handle(client net.Conn, id uint64, first int) {
	defer p.wg.Done()
	defer p.untrack(client)
	defer client.Close()

	start := time.Now()
	backend, idx, dialErrs := p.dial(first)
	for _, err := range dialErrs {
		p.logf("conn %d from %s: skipping: %v", id, client.RemoteAddr(), err)
	}
	if backend == nil {
		p.logf("conn %d from %s: no backend reachable; closing", id, client.RemoteAddr())
		return
	}
	defer func() {
		p.mu.Lock()
		p.open[idx]--
		p.mu.Unlock()
	}()
	if !p.track(backend) {
		backend.Close()
		return
	}
	defer p.untrack(backend)
	defer backend.Close()
	p.logf("conn %d from %s -> %s (%s)", id, client.RemoteAddr(), p.names[idx], p.backends[idx])

	var up, down int64
	done := make(chan struct{}, 2)
	go func() {
		up, _ = io.Copy(backend, client)
		done <- struct{}{}
	}()
	go func() {
		down, _ = io.Copy(client, backend)
		done <- struct{}{}
	}()
	<-done
	// Either side ended: end both, which also ends the other copy.
	client.Close()
	backend.Close()
	<-done
	p.logf("conn %d -> %s closed after %s (%d bytes up, %d down)", id, p.names[idx], since(start), up, down)
}

// dial connects to backend start or, when that fails, to the following ones in order, trying
// each backend at most once. When it had to skip backends, the next connection starts after the
// one that answered, so live backends share connections evenly while dead ones are skipped.
func (p *rrProxy) dial(start int) (net.Conn, int, []error) {
	n := len(p.backends)
	d := net.Dialer{Timeout: proxyDialTimeout}
	var errs []error
	for k := 0; k < n; k++ {
		i := (start + k) % n
		if !p.routed(i) {
			errs = append(errs, fmt.Errorf("%s (%s): out of rotation", p.names[i], p.backends[i]))
			continue
		}
		c, err := d.DialContext(p.ctx, "tcp", p.backends[i])
		if err != nil {
			errs = append(errs, fmt.Errorf("%s (%s): %w", p.names[i], p.backends[i], err))
			if p.ctx.Err() != nil {
				break
			}
			continue
		}
		p.mu.Lock()
		if k > 0 {
			p.next = (i + 1) % n
		}
		p.routes = append(p.routes, i)
		p.open[i]++
		p.mu.Unlock()
		return c, i, errs
	}
	return nil, -1, errs
}

func (p *rrProxy) logf(format string, args ...any) {
	p.logMu.Lock()
	defer p.logMu.Unlock()
	fmt.Fprintf(p.log, "%s "+format+"\n", append([]any{time.Now().Format(time.RFC3339Nano)}, args...)...)
}

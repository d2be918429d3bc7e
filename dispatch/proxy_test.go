package dispatch_test

import (
	"io"
	"net"
	"sync"
	"testing"
)

// proxy forwards TCP connections to a Redis server and can stall them all:
// while stalled, bytes wait in the kernel's buffers and nothing answers,
// as across a network partition. Connections stay open.
type proxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	cond   *sync.Cond
	stall  bool
}

func newProxy(t *testing.T, target string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, target: target}
	p.cond = sync.NewCond(&p.mu)
	t.Cleanup(func() {
		p.setStall(false)
		ln.Close()
	})
	go p.serve()
	return p
}

func (p *proxy) addr() string { return p.ln.Addr().String() }

func (p *proxy) setStall(on bool) {
	p.mu.Lock()
	p.stall = on
	p.mu.Unlock()
	p.cond.Broadcast()
}

func (p *proxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		go p.pipe(c, s)
		go p.pipe(s, c)
	}
}

// pipe copies from src to dst, holding each chunk while stalled.
func (p *proxy) pipe(dst, src net.Conn) {
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			for p.stall {
				p.cond.Wait()
			}
			p.mu.Unlock()
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if err != io.EOF {
				return
			}
			return
		}
	}
}

package topo

import (
	"errors"
	"fmt"
	"net"
	"time"
)

// PushEvery is how often a backend's push port writes to each of its
// connections.
const PushEvery = 100 * time.Millisecond

// pushStall is how long a push connection may go without moving a line,
// either way, before its end gives it up: longer than any failover the
// tests make.
const pushStall = 10 * time.Second

// servePush is the server-first half of a backend: every connection
// accepted on ln gets a line "id=ID client=IP:PORT seq=N" at once and then
// every every, on the server's own schedule, whether or not the client
// says anything (it need not). It returns when ln is closed.
func servePush(ln net.Listener, id string, every time.Duration) error {
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			return err
		}
		go pushTo(c, id, every)
	}
}

// pushTo writes to c until a write fails or cannot leave within pushStall
// (the client is gone, or its connection was lost in a failover).
func pushTo(c net.Conn, id string, every time.Duration) {
	defer c.Close()
	tick := time.NewTicker(every)
	defer tick.Stop()
	for seq := 1; ; seq++ {
		if err := c.SetWriteDeadline(time.Now().Add(pushStall)); err != nil {
			return
		}
		if _, err := fmt.Fprintf(c, "id=%s client=%s seq=%d\n", id, c.RemoteAddr(), seq); err != nil {
			return
		}
		<-tick.C
	}
}

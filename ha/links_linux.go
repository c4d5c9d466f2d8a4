package ha

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// FollowLinks is Options.Links over rtnetlink: a link is up when it is
// administratively up and has carrier (IFF_UP and IFF_RUNNING); a missing
// link is down.
func FollowLinks(ctx context.Context, names []string, up func(name string, up bool)) error {
	updates := make(chan netlink.LinkUpdate, 64)
	done := make(chan struct{})
	defer close(done)
	errs := make(chan error, 1)
	err := netlink.LinkSubscribeWithOptions(updates, done, netlink.LinkSubscribeOptions{
		ErrorCallback: func(err error) {
			select {
			case errs <- err:
			default:
			}
		},
	})
	if err != nil {
		return fmt.Errorf("following links: %w", err)
	}
	// The state now, after subscribing so that no change is missed.
	var links []netlink.Link
	for range 5 { // a dump that raced a link change is read again
		if links, err = netlink.LinkList(); !errors.Is(err, netlink.ErrDumpInterrupted) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("listing links: %w", err)
	}
	for _, name := range names {
		i := slices.IndexFunc(links, func(l netlink.Link) bool { return l.Attrs().Name == name })
		up(name, i >= 0 && linkUp(links[i].Attrs()))
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-errs:
			return fmt.Errorf("following links: %w", err)
		case u, ok := <-updates:
			if !ok {
				return fmt.Errorf("following links: the subscription ended")
			}
			a := u.Link.Attrs()
			if !slices.Contains(names, a.Name) {
				continue
			}
			// RTM_DELLINK: the link is gone.
			up(a.Name, u.Header.Type != unix.RTM_DELLINK && linkUp(a))
		}
	}
}

func linkUp(a *netlink.LinkAttrs) bool {
	return a.Flags&net.FlagUp != 0 && a.Flags&net.FlagRunning != 0
}

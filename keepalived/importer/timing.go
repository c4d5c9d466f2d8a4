package importer

import (
	"strconv"
	"time"

	"github.com/lbdproject/lbd/keepalived/conf"
)

// timing is what keepalived lets a virtual server, a real server and a
// checker each set, the inner one winning (check_data.c's inheritance).
type timing struct {
	delayLoop, connectTimeout *time.Duration
	retry                     *int
	virtualhost               *string
}

// read takes one timing statement into t; false if c is not one. The
// statements lbd does not carry are reported here.
func (t *timing) read(rep *reporter, c *conf.Node) bool {
	arg, _ := c.Arg(0)
	switch c.Keyword {
	case "delay_loop", "connect_timeout":
		d, ok := seconds(arg)
		if !ok {
			rep.notMapped(c, "%q is not a number of seconds", arg)
			return true
		}
		if c.Keyword == "delay_loop" {
			t.delayLoop = &d
		} else {
			t.connectTimeout = &d
		}
	case "retry", "nb_get_retry":
		n, err := strconv.ParseUint(arg, 10, 31)
		if err != nil {
			rep.notMapped(c, "%q is not a count", arg)
			return true
		}
		v := int(n)
		t.retry = &v
	case "virtualhost":
		t.virtualhost = &arg
	case "delay_before_retry":
		rep.differs(c, "lbd retries at the check's interval: a failing real server is taken out after fall × interval, not after the retries' shorter delay")
	case "warmup":
		rep.differs(c, "lbd spreads the first checks itself; keepalived's random delay before the first check is not carried")
	default:
		return false
	}
	return true
}

// over is t with what inner sets replacing it.
func (t timing) over(inner timing) timing {
	if inner.delayLoop != nil {
		t.delayLoop = inner.delayLoop
	}
	if inner.connectTimeout != nil {
		t.connectTimeout = inner.connectTimeout
	}
	if inner.retry != nil {
		t.retry = inner.retry
	}
	if inner.virtualhost != nil {
		t.virtualhost = inner.virtualhost
	}
	return t
}

// seconds reads keepalived's timer: seconds, with up to six decimals.
func seconds(s string) (time.Duration, bool) {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f < 0 || f > 1e9 {
		return 0, false
	}
	return time.Duration(f * float64(time.Second)).Round(time.Microsecond), true
}

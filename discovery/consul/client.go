package consul

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/lbdproject/lbd/config"
)

// DefaultAddress is the agent lbd talks to when config.Consul.Address is
// empty: the local agent, as Consul intends clients to use it.
const DefaultAddress = "127.0.0.1:8500"

// MaxConns caps the connections a Client holds to the agent. The agent
// refuses more than limits.http_max_conns_per_client (default 200) per
// client address, and other programs on the same host share that budget.
// The Watcher has at most Options.MaxConcurrency reads and two long-polls
// per datacenter in flight, the Registrar one request: 11 with one
// datacenter and the defaults. net/http may open a few more than the
// requests in flight (a request can start before the connection of the
// one before it is back in the idle pool); the cap bounds that. Beyond it
// (more than a dozen datacenters), requests wait for a free connection.
const MaxConns = 32

// Client is a consul/api client built from lbd's configuration. It embeds
// *api.Client, so it is used like one (c.Agent(), c.Health(), ...); it also
// keeps what the Watcher needs to ask Consul about the token's permissions,
// which consul/api does not expose. The token is never logged, and no error
// a Client returns contains it.
type Client struct {
	*api.Client

	hc    *http.Client
	base  url.URL // scheme and host of the agent
	token string
	dc    string // the default datacenter, config.Consul.Datacenter
}

// NewClient builds a Client from lbd's [consul] settings:
//   - Address is host:port, default DefaultAddress; URLs ("https://...",
//     "unix://...") are refused: the scheme has its own setting.
//   - Scheme is "http" (default) or "https".
//   - Datacenter, when set, is the default datacenter of every request;
//     otherwise the agent's own.
//   - TokenFile holds the ACL token (surrounding white space trimmed). The
//     token is read once, here; an empty or unreadable file is an error.
//     Without a TokenFile, consul/api's CONSUL_HTTP_TOKEN and
//     CONSUL_HTTP_TOKEN_FILE environment variables apply, as for every
//     Consul client.
//   - TLS: CA file, client certificate and key, server name and
//     InsecureSkipVerify.
//
// All requests share one http.Transport with keep-alive, so that long-polls
// and fetches reuse connections instead of opening one per request.
func NewClient(cfg config.Consul) (*Client, error) { return newClient(cfg, nil, MaxConns) }

// dialFunc is http.Transport.DialContext; tests pass one that counts
// connections.
type dialFunc func(ctx context.Context, network, addr string) (net.Conn, error)

func newClient(cfg config.Consul, dial dialFunc, maxConns int) (*Client, error) {
	addr := cfg.Address
	if addr == "" {
		addr = DefaultAddress
	}
	if strings.Contains(addr, "://") {
		return nil, fmt.Errorf("consul: address %q: want host:port (the scheme is a setting of its own)", addr)
	}
	scheme := cfg.Scheme
	switch scheme {
	case "":
		scheme = "http"
	case "http", "https":
	default:
		return nil, fmt.Errorf("consul: scheme %q: want http or https", scheme)
	}

	var token string
	if cfg.TokenFile != "" {
		data, err := os.ReadFile(cfg.TokenFile)
		if err != nil {
			// The error names the file, never its content.
			return nil, fmt.Errorf("consul: reading token file: %w", err)
		}
		token = strings.TrimSpace(string(data))
		if token == "" {
			return nil, fmt.Errorf("consul: token file %s is empty", cfg.TokenFile)
		}
	}

	tlsCfg, err := api.SetupTLSConfig(&api.TLSConfig{
		Address:            cfg.TLS.ServerName,
		CAFile:             cfg.TLS.CAFile,
		CertFile:           cfg.TLS.CertFile,
		KeyFile:            cfg.TLS.KeyFile,
		InsecureSkipVerify: cfg.TLS.InsecureSkipVerify,
	})
	if err != nil {
		return nil, fmt.Errorf("consul: TLS settings: %w", err)
	}
	if dial == nil {
		dial = (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	}
	tr := &http.Transport{
		Proxy:               http.ProxyFromEnvironment,
		DialContext:         dial,
		TLSClientConfig:     tlsCfg,
		TLSHandshakeTimeout: 10 * time.Second,
		// Keep every connection the Watcher may use in parallel idle
		// between requests rather than closing and reopening them.
		MaxIdleConns:          maxConns,
		MaxIdleConnsPerHost:   maxConns,
		MaxConnsPerHost:       maxConns,
		IdleConnTimeout:       90 * time.Second,
		ExpectContinueTimeout: time.Second,
		// No ResponseHeaderTimeout: long-polls legitimately wait minutes
		// for their headers. Requests carry their own deadlines.
	}
	hc := &http.Client{Transport: capTransport{rt: tr, max: answerCap(MaxAnswer, MaxChecksAnswer)}}

	c, err := api.NewClient(&api.Config{
		Address:    addr,
		Scheme:     scheme,
		Datacenter: cfg.Datacenter,
		Token:      token,
		Transport:  tr,
		HttpClient: hc,
	})
	if err != nil {
		return nil, fmt.Errorf("consul: %w", err)
	}
	return &Client{
		Client: c,
		hc:     hc,
		base:   url.URL{Scheme: scheme, Host: addr},
		token:  token,
		dc:     cfg.Datacenter,
	}, nil
}

// authorizeRequest and authorizeResult are the body and answer of
// /v1/internal/acl/authorize, the endpoint Consul's UI uses to learn what a
// token may do.
type authorizeRequest struct {
	Resource string
	Segment  string
	Access   string
}

type authorizeResult struct {
	authorizeRequest
	Allow bool
}

// canRead reports, for each service, whether the token may read it in dc
// ("" for the client's default).
//
// It exists because Consul hides what the anonymous token cannot see
// without saying so: X-Consul-Results-Filtered-By-ACLs is set only for
// real tokens, so lbd running without a token on a default-deny cluster
// would otherwise take "not allowed" for "no instances". When Consul
// cannot tell (ACLs disabled, or a Consul without the endpoint), every
// service counts as readable.
func (c *Client) canRead(ctx context.Context, dc string, services []string) (map[string]bool, error) {
	body := make([]authorizeRequest, len(services))
	for i, s := range services {
		body[i] = authorizeRequest{Resource: "service", Segment: s, Access: "read"}
	}
	data, err := json.Marshal(body)
	if err != nil {
		return nil, fmt.Errorf("encoding ACL authorize request: %w", err)
	}
	u := c.base
	u.Path = "/v1/internal/acl/authorize"
	if dc != "" {
		u.RawQuery = url.Values{"dc": {dc}}.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("ACL authorize request: %w", err)
	}
	req.Header = c.Headers()
	req.Header.Set("Content-Type", "application/json")
	if c.token != "" {
		req.Header.Set("X-Consul-Token", c.token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("POST /v1/internal/acl/authorize: %w", unwrapURLError(err))
	}
	defer resp.Body.Close()
	msg, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("POST /v1/internal/acl/authorize: reading answer: %w", err)
	}
	allowAll := func() map[string]bool {
		m := make(map[string]bool, len(services))
		for _, s := range services {
			m[s] = true
		}
		return m
	}
	switch {
	case resp.StatusCode == http.StatusOK:
	case resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusMethodNotAllowed:
		return allowAll(), nil // a Consul without the endpoint
	case bytes.Contains(msg, []byte("ACL support disabled")):
		return allowAll(), nil
	default:
		return nil, fmt.Errorf("POST /v1/internal/acl/authorize: %s: %s", resp.Status, shorten(string(msg)))
	}
	var out []authorizeResult
	if err := json.Unmarshal(msg, &out); err != nil {
		return nil, fmt.Errorf("POST /v1/internal/acl/authorize: decoding answer: %w", err)
	}
	if len(out) != len(services) {
		return nil, fmt.Errorf("POST /v1/internal/acl/authorize: %d answers to %d questions", len(out), len(services))
	}
	m := make(map[string]bool, len(services))
	for i, s := range services {
		m[s] = out[i].Allow
	}
	return m, nil
}

// unwrapURLError drops the *url.Error wrapper, whose URL carries index and
// wait parameters that change from one request to the next and would make
// every failure look new.
func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// shorten keeps error bodies to one short line.
func shorten(s string) string {
	s = strings.TrimSpace(strings.ReplaceAll(s, "\n", " "))
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return s
}

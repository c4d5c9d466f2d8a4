package config

// ServicesByName indexes the configuration's services by name (names are
// unique: Load refuses duplicates).
func (c *Config) ServicesByName() map[string]*Service {
	m := make(map[string]*Service, len(c.Services))
	for i := range c.Services {
		m[c.Services[i].Name] = &c.Services[i]
	}
	return m
}

// Changes names the services a configuration adds, removes and changes
// against old (nil: none before); where they sit in the files does not
// count. The daemon logs it for every configuration taken into force.
func Changes(old, cur *Config) (added, removed, changed []string) {
	before := map[string]*Service{}
	if old != nil {
		before = old.ServicesByName()
	}
	for i := range cur.Services {
		s := &cur.Services[i]
		o, ok := before[s.Name]
		switch {
		case !ok:
			added = append(added, s.Name)
		case !o.Same(s):
			changed = append(changed, s.Name)
		}
		delete(before, s.Name)
	}
	if old != nil {
		for _, s := range old.Services {
			if _, gone := before[s.Name]; gone {
				removed = append(removed, s.Name)
			}
		}
	}
	return added, removed, changed
}

// UsesIPv6 reports whether a service is IPv6, or Consul may define one
// that is (from an IPv6 VIP pool) at any time.
func (c *Config) UsesIPv6() bool {
	for i := range c.Services {
		if c.Services[i].Family() == 6 {
			return true
		}
	}
	if c.Consul.Enabled && c.Consul.VirtualServices.Tag != "" {
		for _, p := range c.Consul.VirtualServices.VIPPools {
			if p.Addr().Is6() {
				return true
			}
		}
	}
	return false
}

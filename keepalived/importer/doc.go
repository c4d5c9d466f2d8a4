// Package importer maps a keepalived configuration, as keepalived/conf
// reads it, to lbd's TOML: virtual servers and their groups become
// [[service]] tables, real servers and checkers their real servers and
// health checks, and global_defs' lvs_timeouts the [ipvs] table. What lbd
// cannot express, or expresses differently, is listed in a Report at its
// file:line, so that nothing is dropped silently; the TOML it writes always
// passes lbd's validation. Importing the same tree twice gives the same
// bytes.
package importer

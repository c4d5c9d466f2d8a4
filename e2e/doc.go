// Package e2e holds lbd's end-to-end tests. They need root and a kernel with
// IPVS, carry the build tag "e2e", and are run by e2e/run.sh (on the host when
// its kernel has IPVS, otherwise inside a QEMU guest). See e2e/README.md.
package e2e

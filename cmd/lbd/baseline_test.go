package main

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/lbdproject/lbd/dataplane/desired"
	"github.com/lbdproject/lbd/dataplane/ipvs"
)

func TestRestartBaseline(t *testing.T) {
	owned := []ipvs.Service{
		svc(vsWeb, ipvs.Dest{Addr: rsB, Weight: 2}, ipvs.Dest{Addr: rsC, Weight: 0}, ipvs.Dest{Addr: rsA, Weight: 1}),
		svc(vsAPI),
	}
	want := []desired.Service{
		{Key: vsWeb, Scheduler: "wrr", Dests: []desired.Dest{{Addr: rsA, Weight: 1}, {Addr: rsB, Weight: 2}}},
		{Key: vsAPI, Scheduler: "wrr"},
	}
	if got := restartBaseline(owned); !reflect.DeepEqual(got, want) {
		t.Errorf("baseline %+v\nwant     %+v", got, want)
	}
}

func TestAppliedHash(t *testing.T) {
	dir := t.TempDir()
	if h, err := readAppliedHash(dir); h != "" || err != nil {
		t.Fatalf("no file: %q, %v; want \"\", nil", h, err)
	}
	for _, h := range []string{"3f2a9c", "77b0e1"} {
		if err := writeAppliedHash(dir, h); err != nil {
			t.Fatal(err)
		}
		if got, err := readAppliedHash(dir); got != h || err != nil {
			t.Errorf("read %q, %v; want %q", got, err, h)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, appliedConfigFile+".new")); !os.IsNotExist(err) {
		t.Errorf("the temporary file is left behind: %v", err)
	}
	if err := writeAppliedHash(filepath.Join(dir, "missing"), "x"); err == nil {
		t.Errorf("writing into a missing directory did not fail")
	}
}

# lbd's build. The Go toolchain in PATH is used as it is (GOTOOLCHAIN=local).
#
#   make              build bin/lbd (static, with the version linked in)
#   make deb          build dist/lbd_<version>_amd64.deb
#   make deb ARCH=arm64
#   make deb-test     build the package and test it in a clean Debian 12 root
#                     (root; scripts/deb-test.sh)
#   make clean
#
# VERSION defaults to packaging/deb/version.sh (from git describe), and
# SOURCE_DATE_EPOCH to the commit time, so a rebuild of a commit is identical.

export GOTOOLCHAIN := local
ARCH ?= amd64
VERSION ?= $(shell packaging/deb/version.sh)
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct)
export ARCH VERSION SOURCE_DATE_EPOCH

.PHONY: all build deb deb-test clean

all: build

build:
	CGO_ENABLED=0 go build -trimpath -buildvcs=false \
		-ldflags "-s -w -buildid= -X main.version=$(VERSION)" -o bin/lbd ./cmd/lbd

deb:
	packaging/deb/build.sh

deb-test:
	scripts/deb-test.sh

clean:
	rm -rf bin dist

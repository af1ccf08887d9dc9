#!/usr/bin/env bash
# Builds the Go client offline from Debian's Go packages (golang-go, protoc-gen-go,
# protoc-gen-go-grpc, golang-google-grpc-dev, golang-google-protobuf-dev,
# golang-github-golang-protobuf-1-5-dev) in GOPATH mode, and prints the binary's path.
#
# The Go code for the contract is generated here from proto/, never committed, so it cannot
# drift from the contract. The build tree is build/go (git-ignored): a GOPATH whose import
# path github.com/omni-grpc/omni-grpc/clients/go holds a copy of this folder plus gen/.
#
#   clients/go/build.sh            # prints build/go/bin/omni-stream-wav
#   OMNI_GO_BUILD=/tmp/x clients/go/build.sh
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
build="${OMNI_GO_BUILD:-$root/build/go}"
python="${PYTHON:-$root/.venv/bin/python}"
module="github.com/omni-grpc/omni-grpc/clients/go"
package_dir="$build/src/$module"

for tool in go protoc-gen-go protoc-gen-go-grpc; do
  if ! command -v "$tool" >/dev/null; then
    echo "build.sh: $tool is missing; install Debian's golang-go protoc-gen-go protoc-gen-go-grpc" \
      "golang-google-grpc-dev golang-google-protobuf-dev golang-github-golang-protobuf-1-5-dev" >&2
    exit 1
  fi
done

# A fresh copy each time, so files deleted here do not linger in the build.
rm -rf "$package_dir"
mkdir -p "$package_dir" "$build/bin"
cp -R "$here/." "$package_dir/"

# The generated code goes to $module/gen/omni/duplex/v1, as the contract's go_package says;
# the M mapping says the same, so a proto from before that option builds too.
proto_file="omni/duplex/v1/duplex.proto"
go_import="M$proto_file=$module/gen/omni/duplex/v1;duplexv1"
"$python" -m grpc_tools.protoc -I"$root/proto" \
  --plugin=protoc-gen-go="$(command -v protoc-gen-go)" \
  --plugin=protoc-gen-go-grpc="$(command -v protoc-gen-go-grpc)" \
  --go_out="$build/src" --go_opt="$go_import" \
  --go-grpc_out="$build/src" --go-grpc_opt="$go_import" \
  "$root/proto/$proto_file"

export GO111MODULE=off GOPATH="$build:/usr/share/gocode"
export GOCACHE="${GOCACHE:-$build/cache}"
(cd "$package_dir" && go build -o "$build/bin/omni-stream-wav" ./cmd/omni-stream-wav)
echo "$build/bin/omni-stream-wav"

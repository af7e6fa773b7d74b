#!/bin/sh
# Test certificates for the WAN exchange's mutual-TLS test (grpc_exchange_test.cc), generated at
# test time into a temporary directory: a CA, one peer certificate (server and client use, name
# "heddle-peer") signed by it, and a second CA with its own peer certificate (a stranger).
#   gen_certs.sh DIR
set -eu
dir=$1
mkdir -p "$dir"
cd "$dir"
cat > ext.cnf <<'X'
basicConstraints=CA:FALSE
keyUsage=digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth,clientAuth
subjectAltName=DNS:heddle-peer
X
for ca in ca other; do
  openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=heddle-test-$ca" \
    -keyout $ca.key -out $ca.pem 2>/dev/null
  name=peer
  [ $ca = other ] && name=stranger
  openssl req -newkey rsa:2048 -nodes -subj "/CN=heddle-peer" -keyout $name.key \
    -out $name.csr 2>/dev/null
  openssl x509 -req -in $name.csr -CA $ca.pem -CAkey $ca.key -CAcreateserial -days 2 \
    -extfile ext.cnf -out $name.pem 2>/dev/null
done

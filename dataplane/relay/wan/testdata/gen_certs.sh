#!/bin/sh
# Test certificates for the WAN exchange's mutual-TLS tests (grpc_exchange_test.cc), generated
# at test time into a temporary directory:
#   ca.pem          a CA;
#   peer.pem/.key   a certificate signed by it (server and client use) named "heddle-peer";
#   other.pem, stranger.pem/.key   a second CA and a certificate it signed (a stranger);
#   region-N.pem/.key (N = 1, 2, 3)   one certificate per region, signed by ca.pem, named by its
#                   region id (subject alternative name DNS:N, the default wan.peers[].cert_name);
#   cn-3.pem/.key   region 3's name as the common name only, without subject alternative names.
#   gen_certs.sh DIR
set -eu
dir=$1
mkdir -p "$dir"
cd "$dir"
ext() {  # ext FILE [SAN]
  {
    echo "basicConstraints=CA:FALSE"
    echo "keyUsage=digitalSignature,keyEncipherment"
    echo "extendedKeyUsage=serverAuth,clientAuth"
    if [ -n "${2:-}" ]; then echo "subjectAltName=$2"; fi
  } > "$1"
}
sign() {  # sign NAME CN CA [SAN]
  ext "$1.cnf" "${4:-}"
  openssl req -newkey rsa:2048 -nodes -subj "/CN=$2" -keyout "$1.key" -out "$1.csr" 2>/dev/null
  openssl x509 -req -in "$1.csr" -CA "$3.pem" -CAkey "$3.key" -CAcreateserial -days 2 \
    -extfile "$1.cnf" -out "$1.pem" 2>/dev/null
}
for ca in ca other; do
  openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=heddle-test-$ca" \
    -keyout $ca.key -out $ca.pem 2>/dev/null
done
sign peer heddle-peer ca DNS:heddle-peer
sign stranger heddle-peer other DNS:heddle-peer
for r in 1 2 3; do
  sign region-$r "heddle-region-$r" ca "DNS:$r"
done
sign cn-3 3 ca

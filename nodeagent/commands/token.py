"""`nodeagent token create|list|delete`: bootstrap tokens for joining nodes (kubeadm token's counterpart)."""

from __future__ import annotations

import argparse

from nodeagent.layout import Layout

DEFAULT_KUBECONFIG = Layout.default().admin_kubeconfig_copy


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--kubeconfig", default=DEFAULT_KUBECONFIG, help="admin kubeconfig (default: %(default)s)")
    sub = p.add_subparsers(dest="action", required=True)
    c = sub.add_parser("create", help="create a token and print the join command that uses it")
    c.add_argument("--ttl", type=float, default=24 * 3600.0, help="seconds until it expires (0: never)")
    c.add_argument("--description", default="", help="kept in the token's Secret")
    sub.add_parser("list", help="the bootstrap tokens, with expiry and usages")
    d = sub.add_parser("delete", help="delete a token (by id or whole token)")
    d.add_argument("token")


def run(args: argparse.Namespace) -> int:
    import asyncio

    return asyncio.run(_run(args))


async def _run(args: argparse.Namespace) -> int:
    import asyncio
    import base64
    import sys

    import yaml

    from nodeagent.api import bootstrap_token as tokens
    from nodeagent.client.rest import Client, ClientError

    async with Client.from_kubeconfig(args.kubeconfig) as client:
        try:
            if args.action == "create":
                token = tokens.generate_token()
                await client.create("secrets", tokens.token_secret(token, args.ttl, args.description),
                                    tokens.NAMESPACE)
                tid = token.split(".", 1)[0]
                for _ in range(100):  # the server signs cluster-info for the new token within moments
                    cm = await client.get("configmaps", "cluster-info", "kube-public")
                    if tokens.JWS_PREFIX + tid in (cm.get("data") or {}):
                        break
                    await asyncio.sleep(0.1)
                cluster = yaml.safe_load(cm["data"]["kubeconfig"])["clusters"][0]["cluster"]
                ca = base64.b64decode(cluster["certificate-authority-data"])
                print(tokens.join_command(cluster["server"], token, tokens.ca_cert_hash(ca)))
            elif args.action == "list":
                items = (await client.list("secrets", tokens.NAMESPACE))["items"]
                print(f"{'TOKEN':<24} {'EXPIRES':<22} {'USAGES':<26} DESCRIPTION")
                for s in items:
                    if s.get("type") != tokens.SECRET_TYPE:
                        continue
                    f = tokens.secret_fields(s)
                    usages = ",".join(u for u in ("authentication", "signing")
                                      if f.get(f"usage-bootstrap-{u}") == "true")
                    print(f"{f.get('token-id', '?') + '.<secret>':<24} "
                          f"{f.get('expiration', '<forever>'):<22} {usages:<26} {f.get('description', '')}")
            else:
                tid = args.token.split(".", 1)[0]
                await client.delete("secrets", tokens.SECRET_PREFIX + tid, tokens.NAMESPACE)
                print(f"bootstrap token {tid} deleted")
        except ClientError as e:
            print(f"nodeagent token {args.action}: {e}", file=sys.stderr)
            return 1
    return 0

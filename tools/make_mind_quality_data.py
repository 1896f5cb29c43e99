"""Writes the agent mind's labelled quality data: tests/data/belief_pairs.jsonl and
tests/data/recall_set.json.

The texts are written by hand below; this script only lays them out. ``belief_pairs.jsonl``
holds pairs of belief texts: the same fact reworded (``"fold": true``: a second
``mind_believe`` of it should update the first) and two distinct facts (``"fold": false``,
``"why"`` names what differs: number, date, quantity, negation, entity, order), which must
never fold. ``recall_set.json`` holds a pool of goals, beliefs and reflections (with
confidence and age in days) and queries with the ids of the entries relevant to each; some
queries have none.

Run: python tools/make_mind_quality_data.py
"""

from __future__ import annotations

import json
import pathlib

OUT = pathlib.Path(__file__).resolve().parent.parent / "tests" / "data"

# (fact, [same fact reworded...], [(distinct fact, why)...])
FACTS: list[tuple[str, list[str], list[tuple[str, str]]]] = [
    (
        "TSMC Q2 2026 capacity is fully booked.",
        ["TSMC's 2026 Q2 capacity is fully booked", "TSMC capacity for Q2 2026 is fully booked."],
        [
            ("TSMC Q3 2026 capacity is fully booked.", "number"),
            ("TSMC Q2 2026 capacity is not fully booked.", "negation"),
        ],
    ),
    (
        "Rate limits on the external payments API are 100 req/min.",
        [
            "The external payments API is rate limited to 100 req/min.",
            "Rate limit on the external payments API: 100 requests per minute.",
        ],
        [
            ("Rate limits on the external payments API are 500 req/min.", "number"),
            ("Rate limits on the external payments API are 100 req/sec.", "number"),
        ],
    ),
    (
        "The staging environment uses a different API key than production.",
        [
            "Staging uses a different API key than production.",
            "The staging environment and production use different API keys.",
        ],
        [("The staging environment uses the same API key as production.", "entity")],
    ),
    (
        "The user prefers concise bullet-point summaries over prose.",
        [
            "User prefers concise bullet point summaries over prose",
            "The user prefers summaries as concise bullet points rather than prose.",
        ],
        [("The user prefers prose over concise bullet-point summaries.", "order")],
    ),
    (
        "The production database runs PostgreSQL 16.",
        [
            "Production database is running PostgreSQL 16",
            "PostgreSQL 16 runs the production database.",
        ],
        [
            ("The production database runs PostgreSQL 15.", "number"),
            ("The staging database runs PostgreSQL 16.", "entity"),
        ],
    ),
    (
        "The user's daughter has her birthday party on Saturday afternoon.",
        ["The user's daughter's birthday party is on Saturday afternoon."],
        [
            ("The user's daughter has her birthday party on Sunday afternoon.", "date"),
            ("The user's son has his birthday party on Saturday afternoon.", "entity"),
        ],
    ),
    (
        "Always use tabs instead of spaces when formatting Go code.",
        [
            "Go code should be formatted with tabs instead of spaces.",
            "Use tabs, not spaces, when formatting Go code.",
        ],
        [("Always use spaces instead of tabs when formatting Go code.", "order")],
    ),
    (
        "The quarterly report is due on March 31.",
        ["The quarterly report is due March 31st.", "Quarterly report due date: March 31."],
        [
            ("The quarterly report is due on March 30.", "date"),
            ("The quarterly report is due on May 31.", "date"),
        ],
    ),
    (
        "The deploy window is Tuesday morning.",
        ["Deploy window: Tuesday morning.", "Deployments happen in the Tuesday morning window."],
        [
            ("The deploy window is Thursday morning.", "date"),
            ("The deploy window is Tuesday evening.", "entity"),
        ],
    ),
    (
        "The GitHub API allows 5,000 requests per hour for authenticated users.",
        [
            "Authenticated users get 5,000 GitHub API requests per hour.",
            "GitHub API allows 5000 requests per hour for authenticated users.",
        ],
        [
            ("The GitHub API allows 60 requests per hour for authenticated users.", "number"),
            (
                "The GitHub API allows 5,000 requests per hour for unauthenticated users.",
                "negation",
            ),
        ],
    ),
    (
        "The user is allergic to peanuts.",
        ["User has a peanut allergy.", "The user is allergic to peanuts!"],
        [
            ("The user is not allergic to peanuts.", "negation"),
            ("The user is allergic to shellfish.", "entity"),
        ],
    ),
    (
        "The CI pipeline takes about 12 minutes to run.",
        [
            "The CI pipeline takes roughly 12 minutes to run.",
            "Running the CI pipeline takes about 12 minutes.",
        ],
        [
            ("The CI pipeline takes about 25 minutes to run.", "number"),
            ("The CI pipeline takes about 12 hours to run.", "number"),
        ],
    ),
    (
        "The S3 bucket for backups is in eu-west-1.",
        ["The backups S3 bucket is in eu-west-1.", "S3 bucket for backups lives in eu-west-1"],
        [
            ("The S3 bucket for backups is in us-east-1.", "entity"),
            ("The S3 bucket for backups is in eu-west-2.", "number"),
        ],
    ),
    (
        "Alice owns the billing service.",
        ["The billing service is owned by Alice.", "Alice is the owner of the billing service."],
        [
            ("Bob owns the billing service.", "entity"),
            ("Alice owns the search service.", "entity"),
        ],
    ),
    (
        "The user wants replies in French.",
        ["The user wants their replies in French.", "Reply to the user in French."],
        [("The user wants replies in German.", "entity")],
    ),
    (
        "Invoices are emailed every Monday.",
        ["Invoices are sent by email every Monday.", "Every Monday, invoices are emailed."],
        [
            ("Invoices are emailed every Friday.", "date"),
            ("Invoices are emailed every other Monday.", "quantity"),
        ],
    ),
    (
        "The free plan includes 3 projects.",
        ["The free plan comes with 3 projects.", "Free plan: includes 3 projects."],
        [
            ("The free plan includes 5 projects.", "number"),
            ("The pro plan includes 3 projects.", "entity"),
        ],
    ),
    (
        "The team's sprint ends on June 14, 2026.",
        ["The team sprint ends June 14, 2026.", "Sprint end date for the team: June 14, 2026."],
        [
            ("The team's sprint ends on June 21, 2026.", "date"),
            ("The team's sprint ends on June 14, 2025.", "date"),
        ],
    ),
    (
        "The Redis cache has a TTL of 300 seconds.",
        ["The Redis cache TTL is 300 seconds.", "Redis cache entries have a 300 second TTL."],
        [
            ("The Redis cache has a TTL of 30 seconds.", "number"),
            ("The Redis cache has a TTL of 300 minutes.", "number"),
        ],
    ),
    (
        "The user does not want to receive marketing emails.",
        [
            "The user doesn't want to receive marketing emails.",
            "User does not want marketing emails.",
        ],
        [("The user wants to receive marketing emails.", "negation")],
    ),
    (
        "The mobile app supports iOS 15 and later.",
        [
            "The mobile app supports iOS 15 and newer.",
            "iOS 15 and later are supported by the mobile app.",
        ],
        [
            ("The mobile app supports iOS 16 and later.", "number"),
            ("The mobile app supports Android 15 and later.", "entity"),
        ],
    ),
    (
        "The monthly cloud budget is $12,000.",
        ["Monthly cloud budget: $12,000.", "The cloud budget is $12,000 per month."],
        [
            ("The monthly cloud budget is $15,000.", "number"),
            ("The yearly cloud budget is $12,000.", "entity"),
        ],
    ),
    (
        "Kubernetes nodes are autoscaled between 3 and 10 instances.",
        [
            "The Kubernetes nodes autoscale between 3 and 10 instances.",
            "Kubernetes node autoscaling ranges from 3 to 10 instances.",
        ],
        [
            ("Kubernetes nodes are autoscaled between 3 and 20 instances.", "number"),
            ("Kubernetes nodes are autoscaled between 5 and 10 instances.", "number"),
        ],
    ),
    (
        "The user lives in Lisbon.",
        ["User lives in Lisbon", "The user is based in Lisbon."],
        [
            ("The user lives in Porto.", "entity"),
            ("The user no longer lives in Lisbon.", "negation"),
        ],
    ),
    (
        "The search service depends on Elasticsearch 8.11.",
        [
            "The search service depends on Elasticsearch version 8.11.",
            "Search service dependency: Elasticsearch 8.11.",
        ],
        [
            ("The search service depends on Elasticsearch 7.17.", "number"),
            ("The search service depends on OpenSearch 8.11.", "entity"),
        ],
    ),
    (
        "Passwords must be at least 12 characters long.",
        [
            "Passwords must be 12 characters long at least.",
            "Minimum password length is 12 characters.",
        ],
        [
            ("Passwords must be at least 8 characters long.", "number"),
            ("Passwords must be at most 12 characters long.", "quantity"),
        ],
    ),
    (
        "The support team works from 9am to 5pm CET.",
        ["Support team hours are 9am to 5pm CET.", "The support team works 9am-5pm CET."],
        [
            ("The support team works from 8am to 5pm CET.", "number"),
            ("The support team works from 9am to 5pm EST.", "entity"),
        ],
    ),
    (
        "The legacy API will be shut down in September 2026.",
        [
            "The legacy API is being shut down in September 2026.",
            "Legacy API shutdown: September 2026.",
        ],
        [
            ("The legacy API will be shut down in November 2026.", "date"),
            ("The legacy API will not be shut down in September 2026.", "negation"),
        ],
    ),
    (
        "The user's manager is Priya Raman.",
        ["Priya Raman is the user's manager.", "The user reports to their manager Priya Raman."],
        [("The user's manager is Daniel Okafor.", "entity")],
    ),
    (
        "The checkout conversion rate is 3.2%.",
        ["Checkout conversion rate: 3.2%.", "The conversion rate at checkout is 3.2%."],
        [
            ("The checkout conversion rate is 2.3%.", "number"),
            ("The checkout conversion rate is 3.2% on mobile.", "entity"),
        ],
    ),
    (
        "Uploads larger than 25 MB are rejected.",
        ["Uploads over 25 MB are rejected.", "Uploads larger than 25 MB get rejected."],
        [
            ("Uploads larger than 250 MB are rejected.", "number"),
            ("Uploads larger than 25 GB are rejected.", "number"),
        ],
    ),
    (
        "The user prefers dark mode in the editor.",
        ["User prefers dark mode in the editor", "In the editor, the user prefers dark mode."],
        [
            ("The user prefers light mode in the editor.", "entity"),
            ("The user prefers dark mode in the terminal.", "entity"),
        ],
    ),
    (
        "The build uses Python 3.11.",
        ["The build is on Python 3.11.", "Python 3.11 is used by the build."],
        [("The build uses Python 3.12.", "number"), ("The build uses Python 2.11.", "number")],
    ),
    (
        "Database backups run nightly at 2:00 UTC.",
        [
            "The database backups run every night at 2:00 UTC.",
            "Nightly database backups run at 2:00 UTC.",
        ],
        [
            ("Database backups run nightly at 4:00 UTC.", "number"),
            ("Database backups run weekly at 2:00 UTC.", "quantity"),
        ],
    ),
    (
        "The contract with Acme renews on January 1.",
        ["The Acme contract renews on January 1.", "Our contract with Acme renews January 1."],
        [
            ("The contract with Acme renews on July 1.", "date"),
            ("The contract with Globex renews on January 1.", "entity"),
        ],
    ),
    (
        "The user is vegetarian.",
        ["The user is a vegetarian.", "User is vegetarian"],
        [("The user is vegan.", "entity"), ("The user is not vegetarian.", "negation")],
    ),
    (
        "The on-call rotation changes every Wednesday.",
        [
            "The on-call rotation switches every Wednesday.",
            "Every Wednesday the on-call rotation changes.",
        ],
        [
            ("The on-call rotation changes every Friday.", "date"),
            ("The on-call rotation changes every second Wednesday.", "quantity"),
        ],
    ),
    (
        "The API gateway times out requests after 30 seconds.",
        [
            "The API gateway request timeout is 30 seconds.",
            "Requests time out at the API gateway after 30 seconds.",
        ],
        [
            ("The API gateway times out requests after 60 seconds.", "number"),
            ("The load balancer times out requests after 30 seconds.", "entity"),
        ],
    ),
    (
        "The user's flight to Tokyo departs on May 12.",
        ["The user's Tokyo flight departs May 12.", "The user flies to Tokyo on May 12."],
        [
            ("The user's flight to Tokyo departs on May 21.", "date"),
            ("The user's flight to Osaka departs on May 12.", "entity"),
        ],
    ),
    (
        "Feature flags are managed in LaunchDarkly.",
        [
            "Feature flags are managed with LaunchDarkly.",
            "We manage feature flags in LaunchDarkly.",
        ],
        [("Feature flags are managed in Unleash.", "entity")],
    ),
    (
        "The data warehouse is Snowflake.",
        ["Our data warehouse is Snowflake.", "Snowflake is the data warehouse."],
        [("The data warehouse is BigQuery.", "entity")],
    ),
    (
        "The user has two cats.",
        ["The user has 2 cats.", "User has two cats"],
        [("The user has three cats.", "number"), ("The user has two dogs.", "entity")],
    ),
    (
        "The marketing site is hosted on Vercel.",
        ["The marketing website is hosted on Vercel.", "Vercel hosts the marketing site."],
        [
            ("The marketing site is hosted on Netlify.", "entity"),
            ("The docs site is hosted on Vercel.", "entity"),
        ],
    ),
    (
        "Code reviews need approval from at least two reviewers.",
        [
            "Code reviews require approval from at least two reviewers.",
            "At least two reviewers must approve a code review.",
        ],
        [
            ("Code reviews need approval from at least one reviewer.", "number"),
            ("Code reviews need approval from at most two reviewers.", "quantity"),
        ],
    ),
    (
        "The user drinks coffee without sugar.",
        ["User drinks their coffee without sugar", "The user takes coffee with no sugar."],
        [
            ("The user drinks coffee with sugar.", "negation"),
            ("The user drinks tea without sugar.", "entity"),
        ],
    ),
    (
        "The Stripe webhook secret was rotated on April 3.",
        [
            "The Stripe webhook secret got rotated on April 3.",
            "On April 3 the Stripe webhook secret was rotated.",
        ],
        [
            ("The Stripe webhook secret was rotated on April 13.", "date"),
            ("The Stripe API key was rotated on April 3.", "entity"),
        ],
    ),
    (
        "The frontend is written in TypeScript with React.",
        [
            "The frontend is written in TypeScript and React.",
            "The frontend uses TypeScript with React.",
        ],
        [("The frontend is written in TypeScript with Vue.", "entity")],
    ),
    (
        "Log retention is 90 days.",
        ["Logs are retained for 90 days.", "Log retention period: 90 days."],
        [("Log retention is 30 days.", "number"), ("Log retention is 90 weeks.", "number")],
    ),
    (
        "The user is in the America/New_York time zone.",
        ["The user's time zone is America/New_York.", "User is in America/New_York time zone"],
        [("The user is in the America/Chicago time zone.", "entity")],
    ),
    (
        "The OpenAI account has a monthly spending cap of $500.",
        [
            "The OpenAI account's monthly spending cap is $500.",
            "Monthly spending on the OpenAI account is capped at $500.",
        ],
        [
            ("The OpenAI account has a monthly spending cap of $50.", "number"),
            ("The OpenAI account has a daily spending cap of $500.", "entity"),
        ],
    ),
    (
        "The mobile release is blocked by the App Store review.",
        [
            "The App Store review is blocking the mobile release.",
            "Mobile release is blocked by App Store review.",
        ],
        [
            ("The mobile release is not blocked by the App Store review.", "negation"),
            ("The mobile release is blocked by the Play Store review.", "entity"),
        ],
    ),
    (
        "The user's preferred meeting length is 25 minutes.",
        [
            "The user prefers meetings of 25 minutes.",
            "User's preferred meeting length: 25 minutes.",
        ],
        [("The user's preferred meeting length is 45 minutes.", "number")],
    ),
    (
        "The recommendation model is retrained every week.",
        [
            "The recommendation model gets retrained every week.",
            "Every week the recommendation model is retrained.",
        ],
        [
            ("The recommendation model is retrained every month.", "date"),
            ("The ranking model is retrained every week.", "entity"),
        ],
    ),
    (
        "Customer data must stay in the EU.",
        ["Customer data has to stay in the EU.", "Customer data must remain within the EU."],
        [
            ("Customer data must not stay in the EU.", "negation"),
            ("Customer data must stay in the US.", "entity"),
        ],
    ),
    (
        "The user is learning Rust.",
        ["The user is currently learning Rust.", "User is learning Rust"],
        [("The user is learning Go.", "entity"), ("The user is teaching Rust.", "entity")],
    ),
    (
        "Pull requests are merged with squash commits.",
        ["Pull requests get merged as squash commits.", "PRs are merged with squash commits."],
        [("Pull requests are merged with merge commits.", "entity")],
    ),
    (
        "The staging cluster has 4 GPU nodes.",
        [
            "The staging cluster has four GPU nodes.",
            "There are 4 GPU nodes in the staging cluster.",
        ],
        [
            ("The staging cluster has 8 GPU nodes.", "number"),
            ("The production cluster has 4 GPU nodes.", "entity"),
        ],
    ),
    (
        "Tests must pass before merging to main.",
        ["Tests have to pass before merging to main.", "Before merging to main, tests must pass."],
        [("Tests must pass after merging to main.", "order")],
    ),
    (
        "The user's anniversary is on October 8.",
        ["The user's wedding anniversary is on October 8.", "User's anniversary: October 8."],
        [
            ("The user's anniversary is on October 18.", "date"),
            ("The user's anniversary is on August 8.", "date"),
        ],
    ),
    (
        "The team uses Linear for issue tracking.",
        ["The team tracks issues in Linear.", "Linear is used by the team for issue tracking."],
        [("The team uses Jira for issue tracking.", "entity")],
    ),
    (
        "The VPN is required to access the admin panel.",
        [
            "Access to the admin panel requires the VPN.",
            "The VPN is required for accessing the admin panel.",
        ],
        [
            ("The VPN is not required to access the admin panel.", "negation"),
            ("The VPN is required to access the metrics dashboard.", "entity"),
        ],
    ),
    (
        "The batch job processes 2 million rows per run.",
        [
            "The batch job processes 2 million rows each run.",
            "Each run of the batch job processes 2 million rows.",
        ],
        [
            ("The batch job processes 20 million rows per run.", "number"),
            ("The batch job processes 2 thousand rows per run.", "quantity"),
        ],
    ),
    (
        "The user prefers to be called Sam.",
        ["The user prefers being called Sam.", "Call the user Sam, as they prefer."],
        [("The user prefers to be called Samuel.", "entity")],
    ),
    (
        "The analytics dashboard refreshes every 15 minutes.",
        [
            "The analytics dashboard is refreshed every 15 minutes.",
            "Every 15 minutes the analytics dashboard refreshes.",
        ],
        [
            ("The analytics dashboard refreshes every 5 minutes.", "number"),
            ("The analytics dashboard refreshes every 15 seconds.", "number"),
        ],
    ),
    (
        "Docker images are pushed to the GitLab container registry.",
        [
            "Docker images get pushed to the GitLab container registry.",
            "We push Docker images to GitLab's container registry.",
        ],
        [("Docker images are pushed to the GitHub container registry.", "entity")],
    ),
    (
        "The user is allergic to penicillin.",
        ["The user has a penicillin allergy.", "User is allergic to penicillin"],
        [("The user is allergic to aspirin.", "entity")],
    ),
    (
        "The Q4 board meeting is on December 9.",
        ["The Q4 board meeting takes place on December 9.", "Board meeting for Q4: December 9."],
        [
            ("The Q3 board meeting is on December 9.", "number"),
            ("The Q4 board meeting is on December 19.", "date"),
        ],
    ),
    (
        "The embedding service runs on 2 replicas.",
        ["The embedding service has 2 replicas.", "Two replicas run the embedding service."],
        [("The embedding service runs on 6 replicas.", "number")],
    ),
    (
        "The API returns timestamps in UTC.",
        ["Timestamps from the API are in UTC.", "The API returns UTC timestamps."],
        [("The API returns timestamps in local time.", "entity")],
    ),
    (
        "The user can't attend meetings on Friday afternoons.",
        [
            "The user cannot attend meetings on Friday afternoons.",
            "User can't attend Friday afternoon meetings.",
        ],
        [
            ("The user can attend meetings on Friday afternoons.", "negation"),
            ("The user can't attend meetings on Monday afternoons.", "date"),
        ],
    ),
    (
        "Version 2.4 of the SDK dropped support for Node 16.",
        [
            "SDK version 2.4 dropped support for Node 16.",
            "Node 16 support was dropped in version 2.4 of the SDK.",
        ],
        [
            ("Version 2.5 of the SDK dropped support for Node 16.", "number"),
            ("Version 2.4 of the SDK dropped support for Node 14.", "number"),
        ],
    ),
    (
        "The company's fiscal year starts in April.",
        [
            "The company fiscal year starts in April.",
            "The fiscal year of the company begins in April.",
        ],
        [("The company's fiscal year starts in January.", "date")],
    ),
    (
        "Sentry alerts go to the #incidents Slack channel.",
        [
            "Sentry alerts are sent to the #incidents Slack channel.",
            "The #incidents Slack channel gets the Sentry alerts.",
        ],
        [("Sentry alerts go to the #alerts Slack channel.", "entity")],
    ),
    (
        "The user wants weekly progress reports on Fridays.",
        [
            "The user wants progress reports weekly, on Fridays.",
            "Send the user weekly progress reports on Fridays.",
        ],
        [
            ("The user wants weekly progress reports on Mondays.", "date"),
            ("The user wants monthly progress reports on Fridays.", "quantity"),
        ],
    ),
    (
        "Service A calls service B synchronously.",
        [
            "Service A calls service B in a synchronous way.",
            "Service A makes synchronous calls to service B.",
        ],
        [
            ("Service B calls service A synchronously.", "order"),
            ("Service A calls service B asynchronously.", "entity"),
        ],
    ),
    (
        "Postgres differs from MySQL in how it handles NULLs in unique indexes.",
        ["Postgres differs from MySQL in how NULLs in unique indexes are handled."],
        [("MySQL differs from Postgres in how it handles NULLs in unique indexes.", "order")],
    ),
    (
        "The eu region fails over to the us region.",
        ["The eu region fails over to the us region when it goes down."],
        [("The us region fails over to the eu region.", "order")],
    ),
    (
        "The user's son starts school on September 2.",
        [
            "The user's son starts school September 2.",
            "School starts for the user's son on September 2.",
        ],
        [("The user's son starts school on September 12.", "date")],
    ),
    (
        "The nightly ETL job must finish before 6am.",
        [
            "The nightly ETL job has to finish before 6am.",
            "The nightly ETL job must be finished before 6am.",
        ],
        [
            ("The nightly ETL job must finish before 8am.", "number"),
            ("The nightly ETL job must start after 6am.", "order"),
        ],
    ),
    (
        "The translation API charges $20 per million characters.",
        [
            "The translation API costs $20 per million characters.",
            "Translation API pricing: $20 per million characters.",
        ],
        [
            ("The translation API charges $25 per million characters.", "number"),
            ("The translation API charges $20 per thousand characters.", "quantity"),
        ],
    ),
    (
        "The user never works on weekends.",
        ["The user does not work on weekends.", "The user never works weekends."],
        [
            ("The user always works on weekends.", "negation"),
            ("The user never works on Mondays.", "date"),
        ],
    ),
    (
        "The load test peaked at 1,200 concurrent users.",
        [
            "The load test peaked at 1200 concurrent users.",
            "Peak of the load test: 1,200 concurrent users.",
        ],
        [("The load test peaked at 12,000 concurrent users.", "number")],
    ),
    (
        "Ana is on parental leave until March 2027.",
        [
            "Ana is on parental leave until March 2027.",
            "Ana's parental leave lasts until March 2027.",
        ],
        [
            ("Ana is on parental leave until May 2027.", "date"),
            ("Ana is on parental leave since March 2027.", "order"),
        ],
    ),
]

# More pairs of distinct facts, on their own.
DISTINCT: list[tuple[str, str, str]] = [
    (
        "The user prefers meetings in the morning.",
        "The user prefers meetings in the afternoon.",
        "entity",
    ),
    ("The API key expires in 90 days.", "The API key expires in 9 days.", "number"),
    (
        "The user's rent is due on the 1st of each month.",
        "The user's rent is due on the 15th of each month.",
        "date",
    ),
    ("The cron job runs every 10 minutes.", "The cron job runs every 10 hours.", "number"),
    (
        "Kafka consumers commit offsets automatically.",
        "Kafka consumers don't commit offsets automatically.",
        "negation",
    ),
    ("The primary region is us-east-1.", "The backup region is us-east-1.", "entity"),
    ("Marketing reports to the CEO.", "The CEO reports to marketing.", "order"),
    (
        "The user has been vegetarian since 2019.",
        "The user has been vegetarian since 2021.",
        "date",
    ),
    ("The cluster runs 64 pods.", "The cluster runs 46 pods.", "number"),
    (
        "The user is fine with calls after 6pm.",
        "The user is not fine with calls after 6pm.",
        "negation",
    ),
    ("Version 3.0 removes the v1 endpoints.", "Version 3.0 removes the v2 endpoints.", "number"),
    (
        "The discount applies to annual plans only.",
        "The discount applies to monthly plans only.",
        "entity",
    ),
    ("The office is closed on Good Friday.", "The office is open on Good Friday.", "negation"),
    ("Alice reviews Bob's pull requests.", "Bob reviews Alice's pull requests.", "order"),
    ("The storage quota is 50% used.", "The storage quota is 95% used.", "number"),
    (
        "The user runs a half marathon in October.",
        "The user runs a full marathon in October.",
        "quantity",
    ),
    ("Most customers pay by card.", "Few customers pay by card.", "quantity"),
]


# Recall: a pool of entries and queries over it. Ages are in days before the query.
def g(id_: str, text: str, age: float, priority: str = "normal") -> dict[str, object]:
    return {"id": id_, "type": "goal", "content": text, "priority": priority, "age_days": age}


def b(id_: str, text: str, confidence: str, age: float) -> dict[str, object]:
    return {"id": id_, "type": "belief", "content": text, "confidence": confidence, "age_days": age}


def r(id_: str, text: str, age: float, pinned: bool = False) -> dict[str, object]:
    return {"id": id_, "type": "reflection", "content": text, "pinned": pinned, "age_days": age}


ENTRIES: list[dict[str, object]] = [
    # payments / billing
    b("b_pay_rate", "Rate limits on the external payments API are 100 req/min.", "high", 3),
    b(
        "b_pay_retry",
        "The payments provider retries failed webhooks for up to 3 days.",
        "medium",
        20,
    ),
    b("b_stripe_secret", "The Stripe webhook secret was rotated on April 3.", "high", 40),
    b("b_invoice_day", "Invoices are emailed to customers every Monday.", "medium", 12),
    g("g_billing_migrate", "Migrate billing from Stripe Checkout to Stripe Elements", 15, "high"),
    r(
        "r_pay_sandbox",
        "Test payment flows in the provider's sandbox before touching live keys.",
        9,
        True,
    ),
    # databases
    b("b_db_version", "The production database runs PostgreSQL 16.", "high", 2),
    b("b_db_backup", "Database backups run nightly at 2:00 UTC.", "high", 30),
    b("b_db_replica", "The read replica lags the primary by about 2 seconds at peak.", "medium", 6),
    g("g_db_migrate", "Migrate all production databases to PostgreSQL", 45, "high"),
    r("r_db_dryrun", "Database migrations need a dry run on staging first.", 25, True),
    # staging / environments
    b(
        "b_staging_key",
        "The staging environment uses a different API key than production.",
        "high",
        1,
    ),
    b("b_staging_gpu", "The staging cluster has 4 GPU nodes.", "medium", 14),
    r(
        "r_staging_reset",
        "Staging data gets reset every Sunday, so don't rely on it for long tests.",
        5,
    ),
    # user preferences
    b("b_user_bullets", "The user prefers concise bullet-point summaries over prose.", "high", 4),
    b("b_user_dark", "The user prefers dark mode in the editor.", "medium", 60),
    b("b_user_french", "The user wants replies in French.", "high", 8),
    b("b_user_sam", "The user prefers to be called Sam.", "high", 90),
    b("b_user_meetings", "The user can't attend meetings on Friday afternoons.", "medium", 10),
    b("b_user_weekends", "The user never works on weekends.", "medium", 35),
    r("r_user_long", "Long answers made the user impatient; lead with the conclusion.", 3),
    # personal
    b(
        "b_daughter_party",
        "The user's daughter has her birthday party on Saturday afternoon.",
        "high",
        2,
    ),
    b("b_allergy", "The user is allergic to peanuts.", "high", 120),
    b("b_vegetarian", "The user is vegetarian.", "medium", 50),
    b("b_flight", "The user's flight to Tokyo departs on May 12.", "high", 6),
    g("g_gift", "Buy a birthday present for the user's daughter", 3, "normal"),
    # CI / code
    b("b_ci_time", "The CI pipeline takes about 12 minutes to run.", "medium", 7),
    b("b_go_tabs", "Always use tabs instead of spaces when formatting Go code.", "high", 100),
    b("b_squash", "Pull requests are merged with squash commits.", "high", 33),
    b("b_reviewers", "Code reviews need approval from at least two reviewers.", "high", 21),
    b("b_python", "The build uses Python 3.11.", "medium", 18),
    g("g_ci_speed", "Cut the CI pipeline time below 8 minutes", 11, "normal"),
    r("r_ci_flaky", "Flaky integration tests were caused by shared fixtures; isolate them.", 13),
    # infrastructure
    b(
        "b_k8s_autoscale",
        "Kubernetes nodes are autoscaled between 3 and 10 instances.",
        "medium",
        16,
    ),
    b("b_s3_region", "The S3 bucket for backups is in eu-west-1.", "high", 44),
    b("b_redis_ttl", "The Redis cache has a TTL of 300 seconds.", "medium", 9),
    b("b_gateway_timeout", "The API gateway times out requests after 30 seconds.", "high", 27),
    b("b_vpn_admin", "The VPN is required to access the admin panel.", "high", 70),
    b("b_registry", "Docker images are pushed to the GitLab container registry.", "medium", 55),
    g("g_k8s_upgrade", "Upgrade the Kubernetes cluster to version 1.30", 20, "normal"),
    r(
        "r_k8s_drain",
        "Drain nodes one at a time during upgrades; draining two at once caused an outage.",
        19,
        True,
    ),
    # research
    b("b_tsmc_q2", "TSMC Q2 2026 capacity is fully booked.", "high", 5),
    b("b_tsmc_cowos", "TSMC is expanding CoWoS packaging capacity in 2026.", "medium", 22),
    g("g_tsmc_q3", "Monitor TSMC Q3 2026 capacity announcements", 5, "high"),
    r(
        "r_search_names",
        "Search queries with specific company names return better results than generic queries.",
        5,
    ),
    # team / process
    b("b_alice_billing", "Alice owns the billing service.", "high", 30),
    b("b_manager", "The user's manager is Priya Raman.", "high", 80),
    b("b_oncall", "The on-call rotation changes every Wednesday.", "medium", 15),
    b("b_linear", "The team uses Linear for issue tracking.", "medium", 41),
    b("b_sprint", "The team's sprint ends on June 14, 2026.", "high", 4),
    b("b_ana_leave", "Ana is on parental leave until March 2027.", "medium", 28),
    g("g_onboarding", "Write the onboarding guide for new engineers", 9, "normal"),
    g("g_hire", "Hire two backend engineers before Q3", 26, "high"),
    r("r_standup", "Async standups in Slack worked better than the daily call.", 17),
    # product / analytics
    b("b_conversion", "The checkout conversion rate is 3.2%.", "medium", 11),
    b("b_dashboard", "The analytics dashboard refreshes every 15 minutes.", "low", 24),
    b("b_free_plan", "The free plan includes 3 projects.", "high", 36),
    b("b_upload_limit", "Uploads larger than 25 MB are rejected.", "high", 12),
    g("g_pricing", "Redesign the pricing page for the new plans", 8, "normal"),
    r("r_ab_tests", "A/B tests shorter than two weeks gave misleading conversion results.", 40),
    # compliance / security
    b("b_eu_data", "Customer data must stay in the EU.", "high", 65),
    b("b_passwords", "Passwords must be at least 12 characters long.", "high", 75),
    g("g_soc2", "Prepare the SOC 2 audit evidence", 30, "high"),
    r("r_secrets", "Never paste secrets into tool calls; use the vault references.", 60, True),
    # ML
    b("b_reco_retrain", "The recommendation model is retrained every week.", "medium", 14),
    b("b_embed_replicas", "The embedding service runs on 2 replicas.", "low", 19),
    r(
        "r_eval_set",
        "Evaluating on a held-out set caught a regression the training loss missed.",
        21,
    ),
    # finance / vendors
    b("b_cloud_budget", "The monthly cloud budget is $12,000.", "high", 10),
    b("b_openai_cap", "The OpenAI account has a monthly spending cap of $500.", "medium", 3),
    b("b_acme_contract", "The contract with Acme renews on January 1.", "high", 90),
    b("b_fiscal_year", "The company's fiscal year starts in April.", "medium", 200),
    g("g_cost_cut", "Reduce cloud spend by 15% this quarter", 12, "normal"),
    # misc stale / low confidence distractors
    b("b_old_office", "The office wifi password changes every month.", "low", 150),
    b("b_coffee", "The user drinks coffee without sugar.", "low", 45),
    b("b_cats", "The user has two cats.", "medium", 95),
    r("r_docs_first", "Reading the library docs first saved time over trial and error.", 2),
    r("r_timezones", "Confirm the time zone before scheduling anything for the user.", 14),
    b("b_timezone", "The user is in the America/New_York time zone.", "high", 25),
    b("b_legacy_api", "The legacy API will be shut down in September 2026.", "high", 7),
    b("b_sdk_node", "Version 2.4 of the SDK dropped support for Node 16.", "medium", 31),
    b("b_sentry", "Sentry alerts go to the #incidents Slack channel.", "medium", 23),
    b("b_frontend", "The frontend is written in TypeScript with React.", "high", 52),
    b("b_warehouse", "The data warehouse is Snowflake.", "high", 48),
    b("b_flags", "Feature flags are managed in LaunchDarkly.", "medium", 58),
    b("b_log_retention", "Log retention is 90 days.", "medium", 34),
    g("g_legacy_sunset", "Move the remaining customers off the legacy API", 7, "high"),
]

# (query, relevant ids)
QUERIES: list[tuple[str, list[str]]] = [
    ("What is the rate limit of the payments API?", ["b_pay_rate"]),
    ("payments API requests per minute", ["b_pay_rate"]),
    ("How long does the payment provider keep retrying webhooks?", ["b_pay_retry"]),
    ("When was the Stripe webhook secret rotated?", ["b_stripe_secret"]),
    ("Which day are invoices emailed?", ["b_invoice_day"]),
    ("Stripe Elements migration", ["g_billing_migrate"]),
    ("How should I test payment flows?", ["r_pay_sandbox"]),
    ("What Postgres version does production run?", ["b_db_version"]),
    ("database backup schedule", ["b_db_backup"]),
    ("Is the read replica lagging?", ["b_db_replica"]),
    ("PostgreSQL migration goal", ["g_db_migrate", "b_db_version"]),
    ("How to run a database migration safely", ["r_db_dryrun", "g_db_migrate"]),
    ("Does staging share the production API key?", ["b_staging_key"]),
    ("How many GPU nodes are in staging?", ["b_staging_gpu"]),
    ("Can I run a week-long test on staging data?", ["r_staging_reset"]),
    ("How does the user like summaries formatted?", ["b_user_bullets", "r_user_long"]),
    ("editor theme preference", ["b_user_dark"]),
    ("Which language should I reply in?", ["b_user_french"]),
    ("What name does the user go by?", ["b_user_sam"]),
    ("Can I book a meeting with the user on Friday afternoon?", ["b_user_meetings"]),
    ("Does the user work on Saturdays?", ["b_user_weekends"]),
    ("How long should my answers be?", ["r_user_long", "b_user_bullets"]),
    ("When is the daughter's birthday party?", ["b_daughter_party", "g_gift"]),
    ("food allergies", ["b_allergy"]),
    ("Does the user eat meat?", ["b_vegetarian"]),
    ("dinner restaurant choice for the user", ["b_vegetarian", "b_allergy"]),
    ("When does the Tokyo flight leave?", ["b_flight"]),
    ("birthday present", ["g_gift", "b_daughter_party"]),
    ("How long does CI take?", ["b_ci_time", "g_ci_speed"]),
    ("Go formatting tabs or spaces", ["b_go_tabs"]),
    ("How are pull requests merged?", ["b_squash"]),
    ("How many approvals does a code review need?", ["b_reviewers"]),
    ("Which Python version does the build use?", ["b_python"]),
    ("speed up the CI pipeline", ["g_ci_speed", "b_ci_time"]),
    ("Why were integration tests flaky?", ["r_ci_flaky"]),
    ("Kubernetes autoscaling limits", ["b_k8s_autoscale"]),
    ("Where is the backup bucket?", ["b_s3_region"]),
    ("Redis cache expiry", ["b_redis_ttl"]),
    ("What is the API gateway timeout?", ["b_gateway_timeout"]),
    ("How do I get into the admin panel?", ["b_vpn_admin"]),
    ("Where do Docker images get pushed?", ["b_registry"]),
    ("Kubernetes upgrade plan", ["g_k8s_upgrade", "r_k8s_drain"]),
    ("How should nodes be drained during an upgrade?", ["r_k8s_drain"]),
    ("TSMC capacity", ["b_tsmc_q2", "b_tsmc_cowos", "g_tsmc_q3"]),
    ("semiconductor supply chain", ["b_tsmc_q2", "b_tsmc_cowos", "g_tsmc_q3"]),
    ("Is TSMC Q2 capacity available?", ["b_tsmc_q2"]),
    ("advanced packaging CoWoS expansion", ["b_tsmc_cowos"]),
    ("How should I phrase search queries?", ["r_search_names"]),
    ("Who owns the billing service?", ["b_alice_billing"]),
    ("Who is the user's manager?", ["b_manager"]),
    ("When does on-call rotate?", ["b_oncall"]),
    ("Where do we track issues?", ["b_linear"]),
    ("When does the sprint end?", ["b_sprint"]),
    ("Is Ana available?", ["b_ana_leave"]),
    ("onboarding documentation for new hires", ["g_onboarding"]),
    ("hiring backend engineers", ["g_hire"]),
    ("standup format", ["r_standup"]),
    ("What is the checkout conversion rate?", ["b_conversion"]),
    ("How often does the analytics dashboard refresh?", ["b_dashboard"]),
    ("How many projects does the free plan include?", ["b_free_plan"]),
    ("maximum upload size", ["b_upload_limit"]),
    ("pricing page redesign", ["g_pricing"]),
    ("How long should an A/B test run?", ["r_ab_tests"]),
    ("Where must customer data be stored?", ["b_eu_data"]),
    ("password length policy", ["b_passwords"]),
    ("SOC 2 audit", ["g_soc2"]),
    ("Can I paste an API secret into a tool call?", ["r_secrets"]),
    ("How often is the recommendation model retrained?", ["b_reco_retrain"]),
    ("embedding service replicas", ["b_embed_replicas"]),
    ("Why use a held-out evaluation set?", ["r_eval_set"]),
    ("What is the monthly cloud budget?", ["b_cloud_budget", "g_cost_cut"]),
    ("OpenAI spending cap", ["b_openai_cap"]),
    ("When does the Acme contract renew?", ["b_acme_contract"]),
    ("When does the fiscal year start?", ["b_fiscal_year"]),
    ("reduce cloud costs", ["g_cost_cut", "b_cloud_budget"]),
    ("How does the user take their coffee?", ["b_coffee"]),
    ("Does the user have pets?", ["b_cats"]),
    ("What time zone is the user in?", ["b_timezone", "r_timezones"]),
    ("scheduling a call with the user", ["r_timezones", "b_timezone", "b_user_meetings"]),
    ("When is the legacy API shut down?", ["b_legacy_api", "g_legacy_sunset"]),
    ("Which Node versions does the SDK support?", ["b_sdk_node"]),
    ("Where do Sentry alerts go?", ["b_sentry"]),
    ("What framework is the frontend built with?", ["b_frontend"]),
    ("Which data warehouse do we use?", ["b_warehouse"]),
    ("feature flag tool", ["b_flags"]),
    ("How long are logs kept?", ["b_log_retention"]),
    ("legacy API customers migration", ["g_legacy_sunset", "b_legacy_api"]),
    ("Should I read the docs before experimenting?", ["r_docs_first"]),
    ("What database does production use?", ["b_db_version"]),
    ("staging environment", ["b_staging_key", "b_staging_gpu", "r_staging_reset"]),
    ("the user's preferences", ["b_user_bullets", "b_user_dark", "b_user_french", "b_user_sam"]),
    ("webhook", ["b_pay_retry", "b_stripe_secret"]),
    ("What is the weather in Paris tomorrow?", []),
    ("Who won the football match last night?", []),
    ("Translate 'good morning' into Japanese.", []),
    ("What is the capital of Australia?", []),
    ("Write a haiku about the sea.", []),
    ("How many calories are in a banana?", []),
    ("What is the square root of 144?", []),
    ("Recommend a good science fiction novel.", []),
    ("What time does the pharmacy close?", []),
    ("How do I bake sourdough bread?", []),
    ("What's the stock price of Apple today?", []),
    ("Explain quantum entanglement simply.", []),
    ("Is it going to rain this weekend?", []),
    ("Tell me a joke about penguins.", []),
    ("What is the tallest mountain in Africa?", []),
]


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    lines = []
    for fact, same, distinct in FACTS:
        lines += [json.dumps({"a": fact, "b": other, "fold": True}) for other in same]
        lines += [
            json.dumps({"a": fact, "b": other, "fold": False, "why": why})
            for other, why in distinct
        ]
    lines += [
        json.dumps({"a": a, "b": other, "fold": False, "why": why}) for a, other, why in DISTINCT
    ]
    (OUT / "belief_pairs.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    ids = [e["id"] for e in ENTRIES]
    assert len(ids) == len(set(ids)), "duplicate entry id"
    for query, relevant in QUERIES:
        missing = set(relevant) - set(ids)
        assert not missing, (query, missing)
    recall = {
        "description": (
            "Queries over one pool of agent mind entries; 'relevant' lists the entries a good"
            " recall returns (best first is not required). age_days is the entry's age"
            " (createdAt = updatedAt = now - age_days) when the query is made."
        ),
        "entries": ENTRIES,
        "queries": [{"query": q, "relevant": rel} for q, rel in QUERIES],
    }
    (OUT / "recall_set.json").write_text(json.dumps(recall, indent=1) + "\n", encoding="utf-8")
    folds = sum(1 for line in lines if '"fold": true' in line)
    print(f"{folds} paraphrase pairs, {len(lines) - folds} distinct pairs")
    print(f"{len(ENTRIES)} entries, {len(QUERIES)} queries")


if __name__ == "__main__":
    main()

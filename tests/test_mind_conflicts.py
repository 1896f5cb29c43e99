"""facts_disagree: pairs of belief texts that state different facts must never fold."""

from __future__ import annotations

import pytest

from memstrata.layers.mind.conflicts import disagreement, facts_disagree


@pytest.mark.parametrize(
    ("a", "b", "why"),
    [
        ("TSMC Q2 capacity is fully booked", "TSMC Q3 capacity is fully booked", "number"),
        ("The payments API allows 100 req/min.", "The payments API allows 500 req/min.", "number"),
        ("The payments API allows 100 req/min.", "The payments API allows 100 req/sec.", "number"),
        (
            "The checkout conversion rate is 3.2%.",
            "The checkout conversion rate is 2.3%.",
            "number",
        ),
        ("The monthly budget is $12,000.", "The monthly budget is $15,000.", "number"),
        ("The SDK requires v1.2 or later.", "The SDK requires v1.3 or later.", "number"),
        ("Backups run at 2:00 UTC.", "Backups run at 4:00 UTC.", "number"),
        ("Support opens at 9am.", "Support opens at 10am.", "number"),
        ("The user has two cats.", "The user has three cats.", "number"),
        ("The batch job reads 2 million rows.", "The batch job reads 2 thousand rows.", "number"),
        ("Uploads over 25 MB are rejected.", "Uploads over 25 GB are rejected.", "number"),
        ("The report is due on the 1st.", "The report is due on the 15th.", "number"),
        ("The sprint ends June 14, 2026.", "The sprint ends June 14, 2025.", "number"),
        ("Invoices go out every Monday.", "Invoices go out every second Monday.", "number"),
        ("The report is due on March 31.", "The report is due on May 31.", "date"),
        ("The deploy window is Tuesday.", "The deploy window is Thursday.", "date"),
        ("The deploy window is Tuesday morning.", "The deploy window is Tuesday evening.", "date"),
        ("The user never works on weekends.", "The user never works on Mondays.", "date"),
        ("The offsite is in spring.", "The offsite is in autumn.", "date"),
        ("Backups run nightly.", "Backups run weekly.", "quantity"),
        ("Invoices go out every Monday.", "Invoices go out every other Monday.", "quantity"),
        ("Most customers pay by card.", "Few customers pay by card.", "quantity"),
        ("Reviews need at least two approvals.", "Reviews need at most two approvals.", "quantity"),
        ("The user runs a half marathon.", "The user runs a full marathon.", "quantity"),
        ("The user is allergic to peanuts.", "The user is not allergic to peanuts.", "negation"),
        ("The user wants marketing emails.", "The user doesn't want marketing emails.", "negation"),
        (
            "The user wants marketing emails.",
            "The user doesn\u2019t want marketing emails.",
            "negation",
        ),
        ("The user can attend on Fridays.", "The user can't attend on Fridays.", "negation"),
        ("The user drinks coffee with sugar.", "The user drinks coffee without sugar.", "negation"),
        ("The user always works on weekends.", "The user never works on weekends.", "negation"),
        ("The user lives in Lisbon.", "The user no longer lives in Lisbon.", "negation"),
        (
            "Authenticated users get 5000 calls.",
            "Unauthenticated users get 5000 calls.",
            "negation",
        ),
        ("Service A calls B synchronously.", "Service A calls B asynchronously.", "negation"),
        ("Tests must pass before merging.", "Tests must pass after merging.", "negation"),
        ("The office is open on Good Friday.", "The office is closed on Good Friday.", "negation"),
        ("X differs from Y", "Y differs from X", "order"),
        ("Postgres differs from MySQL here.", "MySQL differs from Postgres here.", "order"),
        ("Service B calls service A.", "Service A calls service B.", "order"),
        ("Alice reviews Bob's pull requests.", "Bob reviews Alice's pull requests.", "order"),
        ("Use tabs instead of spaces.", "Use spaces instead of tabs.", "order"),
        (
            "The eu region fails over to the us region.",
            "The us region fails over to the eu region.",
            "order",
        ),
        ("The conversion rate is 3.2%.", "The conversion rate is 3.2% on mobile.", "scope"),
        (
            "The release is blocked by the App Store.",
            "The release is blocked by the Play Store.",
            "entity",
        ),
        ("Alerts go to Slack via PagerDuty.", "Alerts go to Slack via Opsgenie.", "entity"),
    ],
)
def test_distinct_facts_disagree(a: str, b: str, why: str) -> None:
    assert disagreement(a, b) == why
    assert disagreement(b, a) == why
    assert facts_disagree(a, b) and facts_disagree(b, a)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("TSMC Q2 2026 capacity is fully booked.", "TSMC's 2026 Q2 capacity is fully booked"),
        (
            "The GitHub API allows 5,000 requests per hour.",
            "GitHub API allows 5000 requests per hour.",
        ),
        ("The user has two cats.", "The user has 2 cats."),
        ("The quarterly report is due on March 31.", "The quarterly report is due March 31st."),
        ("The cloud budget is $12,000 per month.", "The monthly cloud budget is $12,000."),
        ("The Redis TTL is 300 seconds.", "Redis entries have a 300 second TTL."),
        ("Backups run nightly at 2:00 UTC.", "Backups run every night at 2:00 UTC."),
        ("The support team works from 9am to 5pm.", "The support team works 9am-5pm."),
        ("The user does not work on weekends.", "The user never works on weekends."),
        ("The user drinks coffee without sugar.", "The user takes coffee with no sugar."),
        ("Invoices are emailed every Monday.", "Every Monday, invoices are emailed."),
        ("The user prefers dark mode in the editor.", "In the editor, the user prefers dark mode."),
        ("The contract with Acme renews on January 1.", "The Acme contract renews on January 1."),
        ("The user's manager is Priya Raman.", "Priya Raman is the user's manager."),
        ("Alice and Bob own billing.", "Bob and Alice own billing."),
        ("The user is learning Rust.", "The user is currently learning Rust."),
        (
            "The eu region fails over to the us region.",
            "The eu region fails over to the us region when it goes down.",
        ),
        ("Uploads over 25 MB are rejected.", "Uploads larger than 25 MB are rejected."),
        ("Passwords need at least 12 characters.", "Minimum password length: 12 characters."),
        ("The user may travel in May.", "The user may travel in May."),
        ("", ""),
    ],
)
def test_the_same_fact_reworded_does_not_disagree(a: str, b: str) -> None:
    assert disagreement(a, b) is None and disagreement(b, a) is None
    assert not facts_disagree(a, b)


def test_may_the_verb_is_not_a_month() -> None:
    assert not facts_disagree("The job may fail in June.", "The job may fail in June")
    assert disagreement("We may ship in June.", "We may ship in July.") == "date"


def test_other_languages_fall_back_to_numbers_and_order() -> None:
    assert (
        disagreement("Le quota est de 100 requêtes.", "Le quota est de 500 requêtes.") == "number"
    )
    assert not facts_disagree("Le quota est de 100 requêtes.", "Le quota est de 100 requêtes")

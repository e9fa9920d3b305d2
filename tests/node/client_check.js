// Drives a Largesse server with the official Node client (tremendous 4.12) and checks every
// response against the types that client declares (declared_types.js). Run by
// tests/test_node_client.py:  node client_check.js '{"base_url": ..., "api_key": ..., ...}'
// Prints {"calls": [...], "problems": [...]} as JSON; exits 1 when a call failed.
"use strict";

const tremendous = require("tremendous");
const { checker } = require("./declared_types.js");

const args = JSON.parse(process.argv[2]);
const config = new tremendous.Configuration({ basePath: `${args.base_url}/api/v2`, accessToken: args.api_key });
const api = (Class) => new Class(config);
const orders = api(tremendous.OrdersApi);
const rewards = api(tremendous.RewardsApi);
const { check } = checker();

const calls = [];
const problems = [];

async function call(name, declared, promise) {
  let response;
  try {
    response = await promise;
  } catch (err) {
    const status = err.response ? err.response.status : "no response";
    const body = err.response ? JSON.stringify(err.response.data) : String(err);
    throw new Error(`${name} failed: ${status} ${body}`);
  }
  calls.push({ name, status: response.status });
  problems.push(...check(response.data, declared, name));
  return response.data;
}

function rewardBody(extra) {
  return {
    payment: { funding_source_id: "BALANCE" },
    reward: {
      products: [args.product],
      value: { denomination: 12.5, currency_code: "USD" },
      recipient: { name: "Node Recipient", email: args.member_email },
      delivery: { method: "EMAIL" },
      ...extra,
    },
  };
}

async function listRewards() {
  const listed = await call("listRewards", "ListRewards200Response", rewards.listRewards());
  // The client sends "Tremendous Node v…": like the Python client it gets ISO 8601 (on a server
  // with LARGESSE_REWARD_LIST_TIMESTAMPS=auto too), the form every JavaScript engine's Date
  // parses; the specification's "… UTC" form only V8's lenient Date reads.
  for (const reward of listed.rewards) {
    if (!/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z$/.test(reward.created_at)) {
      problems.push(`listRewards created_at ${reward.created_at} is not ISO 8601`);
    }
  }
  if (listed.rewards.length === 0) problems.push("listRewards listed nothing");
}

async function main() {
  if (args.approvals) return approvalsFlow();
  if (args.list_rewards) return listRewards();
  const deliverAt = new Date(Date.now() + 3 * 24 * 3600 * 1000).toISOString();
  const emailOrder = await call("createOrder(EMAIL, deliver_at toISOString)", "CreateOrder200Response",
    orders.createOrder(rewardBody({ deliver_at: deliverAt })));
  if (emailOrder.order.rewards[0].deliver_at !== deliverAt.slice(0, 10)) {
    problems.push(`deliver_at ${deliverAt} came back as ${emailOrder.order.rewards[0].deliver_at}`);
  }
  // A LINK reward without an email: recipient.email is optional, not nullable.
  const linkOrder = await call("createOrder(LINK without email)", "CreateOrder200Response",
    orders.createOrder({ ...rewardBody({ delivery: { method: "LINK" }, recipient: { name: "No Email" } }),
                         external_id: `node-${Date.now()}` }));
  const linkReward = linkOrder.order.rewards[0].id;
  await call("getOrder", "GetOrder200Response", orders.getOrder(linkOrder.order.id));
  await call("listOrders", "ListOrders200Response", orders.listOrders());
  await call("getReward(LINK)", "GetReward200Response", rewards.getReward(linkReward));
  await listRewards();
  await call("generateRewardLink", "GenerateRewardLink200Response", rewards.generateRewardLink(linkReward));
  // cancelReward returns an untyped object: only its success matters here. Only a reward whose
  // delivery failed can be canceled (API.md §2.5): the test made one (args.failed_order).
  calls.push({ name: "cancelReward", status: (await rewards.cancelReward(args.failed_reward)).status });
  await call("getOrder(canceled)", "GetOrder200Response", orders.getOrder(args.failed_order));

  const funding = api(tremendous.FundingSourcesApi);
  await call("listFundingSources", "ListFundingSources200Response", funding.listFundingSources());
  await call("getFundingSource(BALANCE)", "GetFundingSource200Response", funding.getFundingSource("BALANCE"));

  const campaigns = api(tremendous.CampaignsApi);
  const created = await call("createCampaign", "CreateCampaign200Response",
    campaigns.createCampaign({ name: `Node campaign ${Date.now()}`, description: null, products: [args.product] }));
  await call("getCampaign", "CreateCampaign200Response", campaigns.getCampaign(created.campaign.id));
  await call("listCampaigns", "ListCampaigns200Response", campaigns.listCampaigns());
  if (args.null_rule_campaign) {
    // Created over raw HTTP with null countries and currencies: the keys come back left out.
    await call("getCampaign(rule sent with nulls)", "CreateCampaign200Response",
      campaigns.getCampaign(args.null_rule_campaign));
  }
  if (args.flagged_reward) {
    // Redeemed from a private address, which has no country: geo.country is left out.
    const fraud = api(tremendous.FraudReviewsApi);
    await call("listFraudReviews", "ListFraudReviews200Response", fraud.listFraudReviews());
    await call("getFraudReview", "GetFraudReview200Response", fraud.getFraudReview(args.flagged_reward));
  }
  await call("createOrder(campaign)", "CreateOrder200Response",
    orders.createOrder(rewardBody({ products: undefined, campaign_id: created.campaign.id })));

  const fields = api(tremendous.FieldsApi);
  await call("createField", "CreateField200Response",
    fields.createField({ display_name: `node_${Date.now()}`, data_type: "Text", required: false }));
  await call("listFields", "ListFields200Response", fields.listFields());

  const products = api(tremendous.ProductsApi);
  await call("listProducts", "ListProductsResponse", products.listProducts());
  await call("getProduct", "GetProductResponse", products.getProduct(args.product));

  const members = api(tremendous.MembersApi);
  const memberList = await call("listMembers", "ListMembers200Response", members.listMembers());
  await call("getMember", "GetMember200Response", members.getMember(memberList.members[0].id));
  await call("listRoles", "ListRoles200Response", api(tremendous.RolesApi).listRoles());
  const organizations = api(tremendous.OrganizationsApi);
  const orgs = await call("listOrganizations", "ListOrganizations200Response", organizations.listOrganizations());
  await call("getOrganization", "GetOrganization200Response", organizations.getOrganization(orgs.organizations[0].id));
  await call("listBalanceTransactions", "ListBalanceTransactions200Response",
    api(tremendous.BalanceTransactionsApi).listBalanceTransactions());
  const webhooks = api(tremendous.WebhooksApi);
  const hook = await call("createWebhook", "CreateWebhook200Response",
    webhooks.createWebhook({ url: `${args.base_url}/node-webhook-receiver` }));
  await call("getWebhook", "CreateWebhook200Response", webhooks.getWebhook(hook.webhook.id));
  await call("listWebhookEvents", "ListWebhookEvents200Response", webhooks.listWebhookEvents(hook.webhook.id));
  await call("listWebhooks", "ListWebhooks200Response", webhooks.listWebhooks());
  if (args.read_only_key) {
    // A read-only key never sees the signing key: private_key is left out, not null.
    const readOnly = new tremendous.Configuration({ basePath: `${args.base_url}/api/v2`,
                                                    accessToken: args.read_only_key });
    const seen = await call("getWebhook(read-only key)", "CreateWebhook200Response",
      new tremendous.WebhooksApi(readOnly).getWebhook(hook.webhook.id));
    if ("private_key" in seen.webhook) problems.push("a read-only key saw the webhook's private_key");
    await call("listWebhooks(read-only key)", "ListWebhooks200Response", new tremendous.WebhooksApi(readOnly).listWebhooks());
  }
  await restOfTheApi(organizations, members);
}

// The operations API.md adds beyond the core: fraud rules, invoices, top-ups, reports, connected
// organizations and their members, sub-organizations, keys and members.
async function restOfTheApi(organizations, members) {
  const stamp = Date.now();
  const rules = await call("listFraudRules", "ListFraudRules200Response", api(tremendous.FraudRulesApi).listFraudRules());
  if (rules.fraud_rules.length === 0) problems.push("listFraudRules listed nothing (the test sets review_ip)");

  const invoices = api(tremendous.InvoicesApi);
  const invoice = await call("createInvoice", "CreateInvoice200Response",
    invoices.createInvoice({ amount: 120.5, po_number: `PO-${stamp}` }));
  await call("getInvoice", "CreateInvoice200Response", invoices.getInvoice(invoice.invoice.id));
  await call("listInvoices", "ListInvoices200Response", invoices.listInvoices());

  const topups = api(tremendous.TopupsApi);
  const topup = await call("createTopup", "CreateTopup200Response",
    topups.createTopup({ funding_source_id: "BALANCE", idempotency_key: `node-${stamp}`, amount: 10.25 }));
  await call("getTopup", "CreateTopup200Response", topups.getTopup(topup.topup.id));
  await call("listTopups", "ListTopups200Response", topups.listTopups());

  const reports = api(tremendous.ReportsApi);
  const report = await call("createReport", "CreateReport200Response",
    reports.createReport({ report_type: "digital_rewards", format: "csv" }));
  await call("getReport", "CreateReport200Response", reports.getReport(report.report.id));

  const connectedApi = api(tremendous.ConnectedOrganizationsApi);
  const connected = (await call("createConnectedOrganization", "CreateConnectedOrganization200Response",
    connectedApi.createConnectedOrganization({ client_id: `node-${stamp}` }))).connected_organization;
  await call("getConnectedOrganization", "CreateConnectedOrganization200Response",
    connectedApi.getConnectedOrganization(connected.id));
  await call("listConnectedOrganizations", "ListConnectedOrganizations200Response",
    connectedApi.listConnectedOrganizations());
  const connectedMembers = api(tremendous.ConnectedOrganizationMembersApi);
  const member = (await call("createConnectedOrganizationMember", "CreateConnectedOrganizationMember200Response",
    connectedMembers.createConnectedOrganizationMember({
      connected_organization_id: connected.id, external_email: `node-${stamp}@customer.example.com`,
      external_name: "Node Customer" }))).connected_organization_member;
  await call("getConnectedOrganizationMember", "CreateConnectedOrganizationMember200Response",
    connectedMembers.getConnectedOrganizationMember(member.id));
  await call("listConnectedOrganizationMembers", "ListConnectedOrganizationMembers200Response",
    connectedMembers.listConnectedOrganizationMembers(connected.id));
  await call("createConnectedOrganizationMemberSession", "CreateConnectedOrganizationMemberSession200Response",
    connectedMembers.createConnectedOrganizationMemberSession(member.id, { return_url: "https://platform.example.com/back" }));

  await call("createOrganization", "CreateOrganization200Response", organizations.createOrganization({
    name: `Node child ${stamp}`, website: "https://child.example.com", with_api_key: true }));
  await call("createApiKey", "CreateApiKey200Response", organizations.createApiKey());
  await call("createMember", "CreateMember200Response",
    members.createMember({ email: `node-${stamp}@example.org`, role: "MEMBER" }));
}

async function approvalsFlow() {
  {
    // The organization requires approval (set by the test): approve one order, reject another.
    const pending = [];
    for (let i = 0; i < 2; i++) {
      const placed = await call(`createOrder(pending ${i})`, "CreateOrder200Response",
        orders.createOrder(rewardBody({ delivery: { method: i ? "LINK" : "EMAIL" } })));
      if (placed.order.status !== "PENDING APPROVAL") problems.push(`order ${i} is ${placed.order.status}`);
      pending.push(placed.order.id);
    }
    const approved = await call("approveOrder", "GetOrder200Response", orders.approveOrder(pending[0]));
    const rejected = await call("rejectOrder", "GetOrder200Response", orders.rejectOrder(pending[1]));
    if (approved.order.status !== "EXECUTED") problems.push(`approved order is ${approved.order.status}`);
    if (rejected.order.status !== "CANCELED") problems.push(`rejected order is ${rejected.order.status}`);
    try {
      await orders.approveOrder(pending[1]);
      problems.push("approving a rejected order succeeded");
    } catch (err) {
      calls.push({ name: "approveOrder(rejected)", status: err.response && err.response.status });
    }
  }
}

main().then(
  () => {
    process.stdout.write(JSON.stringify({ calls, problems }));
  },
  (err) => {
    process.stdout.write(JSON.stringify({ calls, problems, error: String(err.message || err) }));
    process.exitCode = 1;
  },
);

import './base.css';
import './chart.css';
import './waiting.css';
import './refusal.css';
import './elsewhere.css';
